"""The I/O seam and its failpoints (decision 12; reliability anchors §11 items 6, 7).

Contract: a durable replace is temp (create-exclusive, 0600) → write → fsync → rename
→ directory fsync; any failure before the rename leaves the old file byte-identical and
no temp behind; an fsync or write failure is fatal (`FatalIoError`, exit 4): the being
is marked `failed`, a `stopped`/`failed` event is journaled, and `state.json` is not
written again; a failed journal append is fatal too.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.domain import events
from singularity.errors import FatalIoError
from singularity.runtime.being import LiveBeing, open_being
from singularity.storage import fsio
from singularity.store.directory import peek_state

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _disarm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    fsio.arm_failpoints("")
    yield
    fsio.arm_failpoints("")


def _temps(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


# --- arming ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", ["x", "x=", "x=boom", "x=eio@0", "x=eio@a", "x=eio@-1", "x=kill,y=nope"]
)
def test_invalid_failpoint_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="invalid failpoint"):
        fsio.arm_failpoints(spec)


def test_failpoint_fires_on_the_nth_hit_only() -> None:
    fsio.arm_failpoints(" a.b=eio@3 , c.d=enospc ")
    fsio.failpoint("a.b")
    fsio.failpoint("a.b")
    with pytest.raises(OSError) as caught:
        fsio.failpoint("a.b")
    assert caught.value.errno == errno.EIO
    fsio.failpoint("a.b")  # only the third hit
    with pytest.raises(OSError) as caught:
        fsio.failpoint("c.d")
    assert caught.value.errno == errno.ENOSPC
    fsio.failpoint("unarmed")


def test_arming_again_replaces_the_previous_set() -> None:
    fsio.arm_failpoints("a=eio")
    fsio.arm_failpoints("b=eio")
    fsio.failpoint("a")
    with pytest.raises(OSError):
        fsio.failpoint("b")


# --- the primitives --------------------------------------------------------------------


@pytest.fixture
def dir_fd(tmp_path: Path) -> Iterator[int]:
    fd = fsio.open_dir(tmp_path)
    yield fd
    os.close(fd)


def test_replace_file_writes_0600_under_any_umask(tmp_path: Path, dir_fd: int) -> None:
    os.umask(0o000)
    fsio.replace_file(dir_fd, "f.json", b"new", temp_prefix=".f-", point="f")
    assert (tmp_path / "f.json").read_bytes() == b"new"
    assert stat.S_IMODE(os.stat(tmp_path / "f.json").st_mode) == 0o600
    assert _temps(tmp_path) == []


def test_replace_file_loops_over_short_writes(
    tmp_path: Path, dir_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    calls: list[int] = []

    def one_byte_at_a_time(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[:1]))

    monkeypatch.setattr(os, "write", one_byte_at_a_time)
    fsio.replace_file(dir_fd, "f", b"abcdef", temp_prefix=".f-", point="f")
    monkeypatch.undo()
    assert (tmp_path / "f").read_bytes() == b"abcdef"
    assert len(calls) == 6


def test_replace_file_syncs_file_then_directory_in_order(
    tmp_path: Path, dir_fd: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    trail: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        trail.append("fsync-dir" if fd == dir_fd else "fsync-file")
        real_fsync(fd)

    def replace(*args: object, **kwargs: object) -> None:
        trail.append("rename")
        real_replace(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    fsio.replace_file(dir_fd, "f", b"x", temp_prefix=".f-", point="f")
    assert trail == ["fsync-file", "rename", "fsync-dir"]


@pytest.mark.parametrize("point", ["f.write", "f.fsync", "f.rename"])
@pytest.mark.parametrize("action", ["eio", "enospc"])
def test_replace_failure_before_rename_keeps_the_old_file(
    tmp_path: Path, dir_fd: int, point: str, action: str
) -> None:
    (tmp_path / "f").write_bytes(b"old")
    inode = os.stat(tmp_path / "f").st_ino
    fsio.arm_failpoints(f"{point}={action}")
    with pytest.raises(OSError) as caught:
        fsio.replace_file(dir_fd, "f", b"new", temp_prefix=".f-", point="f")
    assert caught.value.errno == (errno.EIO if action == "eio" else errno.ENOSPC)
    assert (tmp_path / "f").read_bytes() == b"old"
    assert os.stat(tmp_path / "f").st_ino == inode
    assert _temps(tmp_path) == []


def test_read_at_does_not_follow_symlinks(tmp_path: Path, dir_fd: int) -> None:
    (tmp_path / "target").write_bytes(b"secret")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(OSError) as caught:
        fsio.read_at(dir_fd, "link", 100)
    assert caught.value.errno == errno.ELOOP
    assert fsio.read_at(dir_fd, "target", 3) == b"sec"


def test_temp_names_are_unique_and_of_our_pattern() -> None:
    names = {fsio.temp_name(".state-") for _ in range(1000)}
    assert len(names) == 1000
    from singularity.storage.statedir import TEMP_PATTERN

    assert all(TEMP_PATTERN.fullmatch(name) for name in names)


# --- failures during a being's save ------------------------------------------------------


@pytest.fixture
def being(tmp_path: Path) -> Iterator[LiveBeing]:
    settings = resolve({"state_dir": str(tmp_path / "state")}, environ={})
    live = open_being(settings, clock=lambda: T0)
    live.journal(events.Started(live.now()))
    live.state.status = "running"
    live.save()
    yield live
    live.close()


@pytest.mark.parametrize(
    "spec", ["state.write=enospc", "state.write=eio", "state.fsync=eio", "state.rename=eio"]
)
def test_a_failed_checkpoint_is_fatal_and_leaves_the_old_state(
    tmp_path: Path, being: LiveBeing, spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_dir = tmp_path / "state"
    old = (state_dir / "state.json").read_bytes()
    inode = os.stat(state_dir / "state.json").st_ino
    journal_before = (state_dir / "activity.jsonl").read_bytes()
    saves: list[bytes] = []
    real_replace_file: Callable[..., None] = fsio.replace_file

    def counting_replace_file(dir_fd: int, name: str, data: bytes, **kwargs: str) -> None:
        saves.append(data)
        real_replace_file(dir_fd, name, data, **kwargs)

    monkeypatch.setattr(fsio, "replace_file", counting_replace_file)
    being.state.cycle = 5
    fsio.arm_failpoints(spec)

    with pytest.raises(FatalIoError) as caught:
        being.checkpoint()

    assert caught.value.exit_code == 4
    assert str(caught.value).startswith("cannot save state.json: ")
    assert (state_dir / "state.json").read_bytes() == old
    assert os.stat(state_dir / "state.json").st_ino == inode
    assert _temps(state_dir) == []
    assert being.state.status == "failed"
    assert len(saves) == 1  # never written again, never retried
    assert (state_dir / "activity.jsonl").read_bytes() == journal_before
    with pytest.raises(FatalIoError):
        being.save()
    # The step before the checkpoint is durable in state.redo: the being is at cycle 5.
    assert peek_state(str(state_dir)).cycle == 5  # type: ignore[union-attr]


def test_a_failed_directory_sync_is_fatal(tmp_path: Path, being: LiveBeing) -> None:
    fsio.arm_failpoints("state.dirsync=eio")
    being.state.cycle = 6
    with pytest.raises(FatalIoError):
        being.checkpoint()
    assert being.state.status == "failed"
    assert _temps(tmp_path / "state") == []
    assert peek_state(str(tmp_path / "state")).cycle == 6  # type: ignore[union-attr]


def test_a_failed_checkpoint_with_a_failing_journal_still_marks_the_being_failed(
    tmp_path: Path, being: LiveBeing
) -> None:
    old = (tmp_path / "state" / "state.json").read_bytes()
    journal = (tmp_path / "state" / "activity.jsonl").read_bytes()
    being.state.cycle = 7
    being.journal(events.CycleStarted(being.now(), 7))
    fsio.arm_failpoints("state.fsync=eio,activity.write=eio")
    with pytest.raises(FatalIoError):
        being.checkpoint()
    assert being.state.status == "failed"
    assert (tmp_path / "state" / "state.json").read_bytes() == old
    assert (tmp_path / "state" / "activity.jsonl").read_bytes() == journal


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("activity.write=eio", "cannot append to activity.jsonl: "),
        ("activity.write=enospc", "cannot append to activity.jsonl: "),
        ("redo.write=eio", "cannot append to state.redo: "),
        ("redo.fsync=eio", "cannot append to state.redo: "),
        ("activity.fsync=eio", "cannot sync activity.jsonl: "),
    ],
)
def test_a_failed_journal_append_is_fatal(being: LiveBeing, spec: str, message: str) -> None:
    fsio.arm_failpoints(spec)
    being.journal(events.CycleStarted(being.now(), 1))
    with pytest.raises(FatalIoError) as caught:
        being.checkpoint()  # the step, then the checkpoint that syncs the journal
    assert caught.value.exit_code == 4
    assert str(caught.value).startswith(message)
    assert being.broken


def test_a_failed_journal_write_leaves_the_journal_unchanged(
    tmp_path: Path, being: LiveBeing
) -> None:
    before = (tmp_path / "state" / "activity.jsonl").read_bytes()
    fsio.arm_failpoints("activity.write=enospc")
    being.journal(events.CycleStarted(being.now(), 1))
    with pytest.raises(FatalIoError):
        being.save()
    assert (tmp_path / "state" / "activity.jsonl").read_bytes() == before


def test_a_failed_repair_of_a_torn_journal_is_fatal_and_leaks_nothing(tmp_path: Path) -> None:
    from singularity.store.directory import DirectoryStore

    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    torn = b'{"type":"started","at":"2026-01-02T03:04:05Z"}\n{"type":"cyc'
    (state_dir / "activity.jsonl").write_bytes(torn)
    fds = len(os.listdir("/proc/self/fd"))
    fsio.arm_failpoints("activity.truncate=eio")
    store = DirectoryStore.open(str(state_dir))
    try:
        with pytest.raises(FatalIoError):
            store.load()
    finally:
        store.close()
    assert len(os.listdir("/proc/self/fd")) == fds
    assert (state_dir / "activity.jsonl").read_bytes() == torn


# --- kill at a failpoint, in a real process -----------------------------------------------

KILLED_SAVE = textwrap.dedent(
    """
    import sys
    from singularity.config import resolve
    from singularity.runtime.being import open_being
    from singularity.storage import fsio

    settings = resolve({"state_dir": sys.argv[1], "resume": True}, environ={})
    being = open_being(settings)
    being.state.cycle = 99
    fsio.arm_failpoints(sys.argv[2])
    being.checkpoint()
    print("survived")
    """
)


@pytest.mark.parametrize(
    ("spec", "new_state_visible", "temp_left", "resumed_cycle"),
    [
        ("redo.write=kill", False, False, 0),  # the step never became durable
        ("redo.fsync=kill", False, False, 99),  # its record was written: a kill keeps it
        ("state.write=kill", False, True, 99),  # the checkpoint after the durable step
        ("state.fsync=kill", False, True, 99),
        ("state.rename=kill", False, True, 99),
        ("state.dirsync=kill", True, False, 99),
    ],
)
def test_kill_at_each_save_step_then_resume(
    tmp_path: Path, spec: str, new_state_visible: bool, temp_left: bool, resumed_cycle: int
) -> None:
    state_dir = tmp_path / "state"
    settings = resolve({"state_dir": str(state_dir)}, environ={})
    first = open_being(settings, clock=lambda: T0)
    first.save()
    first.close()
    old = (state_dir / "state.json").read_bytes()

    result = subprocess.run(
        [sys.executable, "-c", KILLED_SAVE, str(state_dir), spec],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == -9, result.stderr
    assert "survived" not in result.stdout
    assert (_temps(state_dir) != []) == temp_left
    current = json.loads((state_dir / "state.json").read_bytes())
    assert current["cycle"] == (99 if new_state_visible else 0)
    if not new_state_visible:
        assert (state_dir / "state.json").read_bytes() == old

    resumed = open_being(resolve({"state_dir": str(state_dir), "resume": True}, environ={}))
    try:
        assert _temps(state_dir) == []  # leftovers of our own naming are removed at boot
        assert resumed.state.cycle == resumed_cycle
    finally:
        resumed.close()
