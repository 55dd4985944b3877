"""A being living on the default local model through `singularity brama serve`, as `make run` does.

Used by `tests/test_brama_default_model.py`; the session's gateway and the default tier's
one-cycle life are started early by `tests/conftest.py` (`support/early.py`).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.commands import SINGULARITY

# The default tier's life: one cycle of one model round of at most 64 tokens, told
# something worth keeping.
ONE_CYCLE = (
    *("--max-cycles", "1", "--max-tool-rounds", "1", "--max-tokens", "64"),
    *("--stimulus", "The operator's name is Maria. Remember her name for later cycles."),
)
LIFE_TIMEOUT_SECS = 2400


def clean(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without the settings a developer's shell may carry for their own beings."""
    return {k: v for k, v in environ.items() if not k.startswith(("BRAMA_", "SINGULARITY_"))}


def live(url: str, root: Path, *flags: str, environ: Mapping[str, str] | None = None) -> Any:
    """Run a being against the gateway in `root`; its saved state, verified."""
    state_dir, workspace = root / "being", root / "workspace"
    workspace.mkdir(exist_ok=True)
    env = clean(os.environ if environ is None else environ)
    lived = subprocess.run(
        [
            *(str(SINGULARITY), "run", "--brama-url", url, "--state-dir", str(state_dir)),
            *("--workspace", str(workspace), "--agent-name", "Ada"),
            *("--specialty", "keeping useful notes", "--cycle-interval-secs", "0"),
            *("--http-timeout-secs", "1500"),
            *("--input-price", "0.5", "--output-price", "1.5", "--log-format", "json"),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=LIFE_TIMEOUT_SECS,
        env=env,
        cwd=root,
        check=False,
    )
    assert lived.returncode == 0, lived.stderr
    verified = subprocess.run(
        [str(SINGULARITY), "verify", str(state_dir)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        check=False,
    )
    assert (verified.returncode, verified.stdout.strip()) == (0, f"{state_dir}: ok"), verified
    return json.loads((state_dir / "state.json").read_text())


def calls(state: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(tool, arguments, result) of every call the being made, in order."""
    results = {
        m["tool_call_id"]: json.loads(m["content"])
        for m in state["conversation"]
        if m["role"] == "tool"
    }
    return [
        (call["function"]["name"], json.loads(call["function"]["arguments"]), results[call["id"]])
        for message in state["conversation"]
        for call in message.get("tool_calls") or []
    ]
