"""Real MCP servers (written with the SDK; the Las one from spec §13 alone), and helpers to
configure and start them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.living import terminate
from tests.support.ports import serve_on_free_port

HERE = Path(__file__).parent
DEMO = HERE / "demo.py"
BARE = HERE / "bare.py"
LAS = HERE / "las.py"
RESULTS = HERE / "results.py"
# The secrets demo.py's `leak_key` and `leak_pem` return (kept equal to its constants).
LEAKED_TOKEN = "tok-canary-91f2c7e4"
LEAKED_KEY = "MIIEcanary0d4e77aa"


def stdio(script: Path, *args: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An `mcpServers` entry that runs `script` with this interpreter."""
    entry: dict[str, Any] = {"command": sys.executable, "args": [str(script), *args]}
    if env is not None:
        entry["env"] = dict(env)
    return entry


def write_skills(path: Path, servers: Mapping[str, Any]) -> Path:
    """Write a skills file with these servers."""
    path.write_text(json.dumps({"mcpServers": dict(servers)}), "utf-8")
    return path


@contextmanager
def http_demo() -> Iterator[str]:
    """The demo server over streamable HTTP on 127.0.0.1; yields its endpoint URL."""
    process, port = serve_on_free_port(
        lambda port: subprocess.Popen(
            [sys.executable, str(DEMO), "--http", str(port)], stderr=subprocess.DEVNULL
        ),
        "the HTTP demo server",
    )
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        terminate(process)


def las_options(root: Path, las_only: str, **extra: str) -> dict[str, str]:
    """Settings of the Las in `las.py` run by this interpreter, its release files made."""
    for name in ("manifest", "signature", "trust"):
        (root / name).write_text("x")
    return {
        "agent_id": "ada-1",
        "las_command": sys.executable,
        "las_entrypoint": str(LAS),
        "las_only": las_only,
        "las_release_manifest": str(root / "manifest"),
        "las_release_manifest_signature": str(root / "signature"),
        "las_release_trust_store": str(root / "trust"),
        "las_release_watermark": str(root / "watermark"),
        **extra,
    }


def as_flags(options: Mapping[str, str]) -> list[str]:
    """Settings as command-line flags."""
    return [
        part for name, value in options.items() for part in ("--" + name.replace("_", "-"), value)
    ]
