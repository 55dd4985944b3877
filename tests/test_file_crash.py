"""SIGKILL during workspace writes: every target holds its old or its new content.

A real subprocess (`tests/support/file_crash_worker.py`) forks writers that stream
writes and log each one's start and end; the test SIGKILLs each writer at a random
moment (and, separately, at each named failpoint of the I/O seam), then checks every
target against the log by checksum and runs the boot cleanup, after which no temp file
may remain.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from singularity.tools.confinement import Workspace
from tests.support.polling import wait_for

WORKER = Path(__file__).resolve().parent / "support" / "file_crash_worker.py"
KILLS = 200
SLOW_KILLS = 2000


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("file_crash_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_worker = _load_worker()
FILES: tuple[str, ...] = _worker.FILES
content = _worker.content


def digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


class Ledger:
    """What the log says each target may hold: the last finished version, or the one in flight."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.done: dict[int, int] = {}
        self.in_flight: tuple[int, int] | None = None
        self.writes = 0

    def load(self) -> None:
        self.done.clear()
        self.in_flight = None
        self.writes = 0
        text = self.log.read_text() if self.log.exists() else ""
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            kind, index, version = line.split()
            if kind == "S":
                self.in_flight = (int(index), int(version))
            else:
                self.done[int(index)] = int(version)
                self.in_flight = None
                self.writes += 1

    def allowed(self, index: int) -> dict[str | None, int | None]:
        """Checksum → version (None: never written) that the target may hold."""
        old = self.done.get(index)
        options: dict[str | None, int | None] = {
            digest(None if old is None else content(index, old).encode()): old
        }
        if self.in_flight is not None and self.in_flight[0] == index:
            new = self.in_flight[1]
            options[digest(content(index, new).encode())] = new
        return options

    def settle(self, index: int, version: int) -> None:
        """Record that an in-flight write did land, so the next round knows the old content."""
        with self.log.open("a") as handle:
            handle.write(f"D {index} {version}\n")


def temp_files(workspace: Path) -> list[str]:
    return [
        os.path.join(directory, name)
        for directory, _, names in os.walk(workspace)
        for name in names
        if name.startswith(".singularity-") and name.endswith(".tmp")
    ]


def verify_and_boot(workspace: Path, ledger: Ledger) -> int:
    """Check old-or-new for every target, settle the in-flight write, clean up; temps seen."""
    ledger.load()
    for index, name in enumerate(FILES):
        options = ledger.allowed(index)
        target = workspace / name
        actual = digest(target.read_bytes() if target.exists() else None)
        assert actual in options, f"{name} holds neither its old nor its new content"
        version = options[actual]
        if version is not None and version != ledger.done.get(index):
            ledger.settle(index, version)
    found = len(temp_files(workspace))
    with Workspace(workspace) as ws:
        assert ws.remove_stale_temps() == found
    assert temp_files(workspace) == []
    return found


class Server:
    """The worker subprocess; each `start` forks a writer and returns its pid."""

    def __init__(self, workspace: Path, log: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), str(workspace), str(log)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def start(self, seed: int, mode: str = "auto", failpoints: str = "-") -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{seed} {mode} {failpoints}\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def exit_code(self) -> int:
        assert self.process.stdout is not None
        return int(self.process.stdout.readline())

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Path, Ledger, Server]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ledger = Ledger(tmp_path / "log")
    server = Server(workspace, ledger.log)
    yield workspace, ledger, server
    server.close()


def kill_loop(workspace: Path, ledger: Ledger, server: Server, kills: int) -> None:
    rng = random.Random(20260824)
    temps_seen = mid_write = 0
    for round_number in range(1, kills + 1):
        pid = server.start(round_number, "walk" if round_number % 2 else "auto")
        time.sleep(rng.uniform(0.0, 0.03))
        os.kill(pid, signal.SIGKILL)
        assert server.exit_code() == -signal.SIGKILL, "the writer stopped before it was killed"
        ledger.load()
        mid_write += ledger.in_flight is not None
        temps_seen += verify_and_boot(workspace, ledger)
    ledger.load()
    print(f"{kills} kills, {mid_write} mid-write, {ledger.writes} writes, {temps_seen} temps")
    # The kills must really land inside writes, and the stream must make progress.
    assert mid_write > kills // 2
    assert ledger.writes > kills // 4


@pytest.mark.timeout(300)
def test_random_kills_leave_old_or_new_content(setup: tuple[Path, Ledger, Server]) -> None:
    kill_loop(*setup, KILLS)


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_random_kills_leave_old_or_new_content_long(setup: tuple[Path, Ledger, Server]) -> None:
    kill_loop(*setup, SLOW_KILLS)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("point", "temp_left"),
    [
        ("workspace.write", True),
        ("workspace.fsync", True),
        ("workspace.rename", True),
        ("workspace.dirsync", False),
    ],
)
def test_kill_at_each_failpoint(
    setup: tuple[Path, Ledger, Server], point: str, temp_left: bool
) -> None:
    workspace, ledger, server = setup
    for hit in (1, 2, 5, 9):
        server.start(hit, "auto", f"{point}=kill@{hit}")
        assert server.exit_code() == -signal.SIGKILL
        ledger.load()
        assert ledger.in_flight is not None
        assert len(temp_files(workspace)) == (1 if temp_left else 0)
        verify_and_boot(workspace, ledger)


def test_a_fresh_interpreter_is_killed_mid_stream(tmp_path: Path) -> None:
    """One end-to-end kill of a whole interpreter, not a forked writer."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ledger = Ledger(tmp_path / "log")
    script = (
        "import sys; sys.path.insert(0, sys.argv[3]); import file_crash_worker as w; "
        "w.write_forever(sys.argv[1], sys.argv[2], 7, False)"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(workspace), str(ledger.log), str(WORKER.parent)]
    )

    def three_writes() -> bool:
        ledger.load()
        return ledger.writes >= 3

    wait_for(three_writes, "three whole writes")
    process.kill()
    assert process.wait() == -signal.SIGKILL
    verify_and_boot(workspace, ledger)
