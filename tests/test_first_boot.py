"""A kill during a being's very first boot never leaves a directory that cannot be started.

Contract: the birth is durable before anything else of the being is. Killed at any write
or sync of its first boot, a being leaves either a `state.json` that `--resume` opens, or
nothing of itself but a journal with no event, which a plain start takes over; either way
the next start lives and `verify` passes. The points are every failpoint the first boot
passes, found by recording a real boot, so a new write in the boot is covered as it lands.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from singularity.runtime.inspect.verify import verify_state_dir
from singularity.runtime.loop.lifecycle import Runtime
from singularity.storage import fsio
from singularity.testing.scripted_server import ScriptedServer
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.failpoints import armed_environment
from tests.support.loop_http import cli_args, settings


def _boot_failpoints(root: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every `name=kill@N` a first boot passes, in order, recorded from a real boot."""
    passed: list[str] = []
    real = fsio.failpoint

    def record(name: str) -> None:
        passed.append(name)
        real(name)

    root.mkdir()
    monkeypatch.setattr(fsio, "failpoint", record)
    with ScriptedServer() as server:

        async def first_boot() -> None:
            runtime = Runtime.boot(settings(root, server))
            passed.append("")  # boot ends here; shutdown's writes are not the first boot
            await runtime.shutdown()

        asyncio.run(first_boot())
    monkeypatch.undo()
    counts: Counter[str] = Counter()
    specs = []
    for name in passed[: passed.index("")]:
        counts[name] += 1
        specs.append(f"{name}=kill@{counts[name]}")
    return specs


def _kill_first_boot_then_start(root: Path, spec: str) -> None:
    root.mkdir()
    env = clean_environment()
    state_dir = root / "being"
    with ScriptedServer() as server:
        args = cli_args(root, server)
        killed = subprocess.run(
            [str(SINGULARITY), "once", *args],
            cwd=root,
            env=armed_environment(spec, env),
            capture_output=True,
        )
        assert killed.returncode == -9, f"{spec} was never reached"
        if (state_dir / "state.json").exists():
            command = [str(SINGULARITY), "once", "--resume", *args]
        else:
            journal = state_dir / "activity.jsonl"
            events = journal.read_bytes().count(b"\n") if journal.exists() else 0
            assert events == 0, f"{spec}: the journal holds events of a being with no state"
            command = [str(SINGULARITY), "once", *args]
        started = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    assert started.returncode == 0, f"{spec}: {started.stderr}"
    assert verify_state_dir(str(state_dir)) == [], spec


def _specs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    specs = _boot_failpoints(tmp_path / "recorded", monkeypatch)
    assert any(spec.startswith("state.") for spec in specs)
    assert any(spec.startswith("activity.") for spec in specs)
    return specs


# Around the birth: the journal created and no state, the birth's save in flight and done,
# `started` journaled. The slow tier kills at every point.
AROUND_BIRTH = (
    "activity.dirsync=kill@1",
    "state.rename=kill@1",
    "state.dirsync=kill@1",
    "activity.fsync=kill@1",
)


@pytest.mark.timeout(600)  # 71 s of the default 300 at a load of 10-17
def test_a_kill_around_the_birth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = _specs(tmp_path, monkeypatch)
    for index, spec in enumerate(AROUND_BIRTH):
        assert spec in specs, f"the first boot no longer passes {spec}"
        _kill_first_boot_then_start(tmp_path / f"kill-{index}", spec)


@pytest.mark.slow
def test_a_kill_at_every_first_boot_failpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index, spec in enumerate(_specs(tmp_path, monkeypatch)):
        _kill_first_boot_then_start(tmp_path / f"kill-{index}", spec)
