"""`singularity brama serve` as a real process for tests: started, awaited, stopped."""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from tests.support.commands import SINGULARITY
from tests.support.polling import wait_for

# A tool in OpenAI's shape and a request that calls for it, for clients of a gateway.
REMEMBER: Any = {
    "type": "function",
    "function": {
        "name": "remember",
        "description": "Persist a memory",
        "parameters": {
            "type": "object",
            "properties": {"kind": {"type": "string"}, "text": {"type": "string"}},
            "required": ["kind", "text"],
            "additionalProperties": False,
        },
    },
}
ASK: Any = [{"role": "user", "content": "Remember that the sea is blue."}]


@contextlib.contextmanager
def brama_serve(
    log: Path,
    *flags: str,
    ready: str = "health",
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """The gateway on a free loopback port: its base URL once `ready` answers 2xx.

    Evaluated prompts are kept beside `log` (not in the user's cache) unless `flags` say.
    It runs in `log`'s folder, with `env` if given (else this process's environment).
    """
    if "--prompt-cache-dir" not in flags:
        flags = (*flags, "--prompt-cache-dir", str(log.parent / "prompts"))
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [str(SINGULARITY), "brama", "serve", "--port", "0", *flags],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=log.parent,
            env=None if env is None else dict(env),
        )
    try:
        yield _await_listening(process, log, ready, dict(headers or {}))
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


def _await_listening(
    process: subprocess.Popen[bytes], log: Path, ready: str, headers: dict[str, str]
) -> str:
    url: list[str] = []

    def answering() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"brama serve exited:\n{log.read_text()}")
        found = re.search(r"listening on (http://\S+/)", log.read_text(errors="replace"))
        try:
            if found and httpx.get(found.group(1) + ready, headers=headers, timeout=5).is_success:
                url.append(found.group(1))
        except httpx.HTTPError:
            pass
        return bool(url)

    try:
        # A hang detector: the default model loads in seconds when idle, 80 s at a load of 20.
        wait_for(answering, "brama serve to answer", timeout=600, interval=0.1)
    except AssertionError:
        process.kill()
        raise
    return url[0]
