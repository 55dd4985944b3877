"""The client of `support/children_zygote.py`: start `singularity` commands as forks.

A crash test that kills a being dozens of times starts each life from an interpreter
that imported the program once, so a life costs milliseconds of start-up, not a second
of imports. Each life still is its own process running the real command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class Zygote:
    """The forking starter; `start` returns a pid, `wait` its exit code (or -signal)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.children_zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
                ),
            },
            text=True,
        )

    def _ask(self, request: dict[str, Any]) -> dict[str, int]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, "the zygote died"
        return dict(json.loads(answer))

    def start(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> int:
        return self._ask({"start": argv, "cwd": str(cwd), "env": env, "log": str(log)})["pid"]

    def wait(self, pid: int) -> int:
        return self._ask({"wait": pid})["status"]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=120)


def running(pid: int) -> bool:
    """Whether a started process still runs (it stays a zombie, its pid its own, until `wait`)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"
