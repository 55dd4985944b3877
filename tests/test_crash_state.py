"""Crash safety of the state directory: SIGKILL a real process hammering tool calls.

After every kill the next boot succeeds, `verify` passes, `state.json` parses, every
memory whose tool call returned before the kill is present, and no temp file remains.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.runtime.being import open_being
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.store.directory import peek_state

WORKER = Path(__file__).parent / "support" / "state_worker.py"
DEFAULT_KILLS = 60
SLOW_KILLS = 1000


class Worker:
    """The worker server subprocess; each `run_until_killed` forks a worker from it."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise AssertionError(f"the worker server ended: {self.process.wait()}")
        return line.strip()

    def _send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def run_until_killed(self, state_dir: Path, first: int, rng: random.Random) -> list[int]:
        """Fork a worker, let it work a random while, SIGKILL it, return acknowledged indices."""
        self._send(f"{state_dir} {first}")
        line = self._line()
        if line != "ready":
            raise AssertionError(f"worker did not start: {line!r}")
        time.sleep(rng.uniform(0, 0.06))
        self._send("kill")
        acks: list[int] = []
        while (line := self._line()).startswith("ack "):
            acks.append(int(line.split()[1]))
        assert line == f"exit {-signal.SIGKILL}", f"the worker stopped before the kill: {line}"
        return acks

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def _boot_and_close(state_dir: Path) -> None:
    settings = resolve({"state_dir": str(state_dir)}, environ={})
    being = open_being(settings, resume=(state_dir / "state.json").exists())
    being.close()


def _crash_loop(tmp_path: Path, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    state_dir = tmp_path / "being"
    worker = Worker()
    try:
        _kill_and_check(worker, state_dir, kills, rng)
    finally:
        worker.close()


def _kill_and_check(worker: Worker, state_dir: Path, kills: int, rng: random.Random) -> None:
    acknowledged: list[int] = []
    next_index = 0
    for kill in range(kills):
        acks = worker.run_until_killed(state_dir, next_index, rng)
        acknowledged += acks
        _boot_and_close(state_dir)
        problems = verify_state_dir(str(state_dir))
        assert problems == [], f"after kill {kill}: {problems}"
        state = peek_state(str(state_dir))
        assert state is not None
        texts = {memory.text for memory in state.mind.memories}
        kept = [i for i in acknowledged if i > max(acknowledged, default=0) - 900]
        missing = [i for i in kept if f"memory {i}" not in texts]
        assert not missing, f"after kill {kill}: acknowledged memories lost: {missing[:5]}"
        leftovers = [name for name in os.listdir(state_dir) if name.endswith(".tmp")]
        assert not leftovers, f"after kill {kill}: temp files left: {leftovers}"
        highest = max((int(t.split()[1]) for t in texts if t.startswith("memory ")), default=-1)
        next_index = max(highest, max(acks, default=-1)) + 1
    assert len(acknowledged) > kills // 4, "the worker barely ran; the test proves little"


@pytest.mark.timeout(900)
def test_sigkill_during_tool_calls_never_loses_an_acknowledged_memory(tmp_path: Path) -> None:
    _crash_loop(tmp_path, DEFAULT_KILLS, seed=20261129)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_sigkill_many_more_times(tmp_path: Path) -> None:
    _crash_loop(tmp_path, SLOW_KILLS, seed=7)
