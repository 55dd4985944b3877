"""SIGKILL during workspace writes: every target holds its old or its new content.

A real subprocess (`tests/support/file_crash_worker.py`) writes a stream of files and
logs each write's start and end; the test kills it at random moments (and, separately,
at each named failpoint of the I/O seam), then checks every target against the log by
checksum and runs the boot cleanup, after which no temp file may remain.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from singularity.tools.confinement import Workspace

WORKER = Path(__file__).resolve().parent / "support" / "file_crash_worker.py"


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("file_crash_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_worker = _load_worker()
FILES: tuple[str, ...] = _worker.FILES
content = _worker.content
KILLS = 100
SLOW_KILLS = 1000


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


def read_target(workspace: Path, name: str) -> bytes | None:
    try:
        return (workspace / name).read_bytes()
    except FileNotFoundError:
        return None


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
        actual = digest(read_target(workspace, name))
        assert actual in options, f"{name} holds neither its old nor its new content"
        version = options[actual]
        if version is not None and version != ledger.done.get(index):
            ledger.settle(index, version)
    found = len(temp_files(workspace))
    with Workspace(workspace) as ws:
        assert ws.remove_stale_temps() == found
    assert temp_files(workspace) == []
    return found


def run_worker(workspace: Path, log: Path, seed: int, *extra: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(workspace), str(log), str(seed), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == b"ready\n"
    return process


def finish(process: subprocess.Popen[bytes]) -> None:
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == -9, stderr.decode()


def kill_loop(tmp_path: Path, kills: int) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ledger = Ledger(tmp_path / "log")
    rng = random.Random(20260824)
    temps_seen = 0
    for round_number in range(1, kills + 1):
        extra = ("--walk",) if round_number % 2 else ()
        process = run_worker(workspace, ledger.log, round_number, *extra)
        time.sleep(rng.uniform(0.0, 0.03))
        process.kill()
        finish(process)
        temps_seen += verify_and_boot(workspace, ledger)
    ledger.load()
    assert ledger.writes > kills // 2, "the worker barely wrote anything before each kill"
    print(f"{kills} kills, {ledger.writes} completed writes, {temps_seen} temps cleaned")


@pytest.mark.timeout(300)
def test_random_kills_leave_old_or_new_content(tmp_path: Path) -> None:
    kill_loop(tmp_path, KILLS)


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_random_kills_leave_old_or_new_content_long(tmp_path: Path) -> None:
    kill_loop(tmp_path, SLOW_KILLS)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("point", "temp_left"),
    [
        ("workspace.write", True),
        ("workspace.fsync", True),
        ("workspace.rename", True),
        ("workspace.dirsync", False),
    ],
)
def test_kill_at_each_failpoint(tmp_path: Path, point: str, temp_left: bool) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ledger = Ledger(tmp_path / "log")
    for hit in (1, 2, 5, 9):
        process = run_worker(workspace, ledger.log, hit, "--failpoints", f"{point}=kill@{hit}")
        finish(process)
        ledger.load()
        assert ledger.in_flight is not None
        assert len(temp_files(workspace)) == (1 if temp_left else 0)
        verify_and_boot(workspace, ledger)
