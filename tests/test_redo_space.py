"""`state.redo`'s space, allocated ahead: a step writes into zeros already synced.

The log starts with its header and a zero-filled chunk; a step's records go at the end of
the records, and a step that would pass the allocated end first extends the log by a
synced chunk. The zero tail is unused space: not a torn record, not corruption, counted
nowhere; a log without one (as older versions wrote) reads and replays the same.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from singularity.domain.state import AgentState
from singularity.errors import FatalIoError
from singularity.runtime.inspect.verify import Findings, inspect_state_dir
from singularity.storage import fsio
from singularity.store import redo
from singularity.store.directory import DirectoryStore, check_log, peek_state
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import boot, live_one_cycle, run
from tests.support.stores import AT, a_being, live_a_step
from tests.support.syncs import SyncLog

CHUNK = 4096
REMEMBER = "singularity_memory_remember"


def _living(path: Path, steps: int, **limits: int) -> tuple[DirectoryStore, AgentState]:
    store = DirectoryStore.open(str(path), **limits)
    state = a_being()
    assert store.load() is None
    store.commit(state, [{"type": "started", "at": AT}])
    for index in range(steps):
        store.commit(state, live_a_step(state, index))
    return store, state


def _used(log: Path) -> bytes:
    return log.read_bytes().rstrip(b"\0")


def _check(path: Path, *, alive: bool) -> tuple[list[str], list[str]]:
    dir_fd = fsio.open_dir(path)
    try:
        return check_log(dir_fd, str(path), alive=alive)
    finally:
        os.close(dir_fd)


def _reloaded(path: Path) -> str:
    store = DirectoryStore.open(str(path))
    try:
        loaded = store.load()
        assert loaded is not None
        return loaded.to_json().decode()
    finally:
        store.close()


def test_steps_fill_the_allocated_space_without_growing_the_file(tmp_path: Path) -> None:
    path = tmp_path / "being"
    store, state = _living(path, 3)
    try:
        data = (path / redo.REDO_FILE).read_bytes()
        base = redo.checkpoint_id((path / "state.json").read_bytes())
        assert len(data) == len(redo.header(base)) + redo.LOG_CHUNK
        scanned = redo.scan(data)
        assert (len(scanned.records), scanned.torn_bytes) == (3, 0)
        assert scanned.good_length == len(data.rstrip(b"\0"))
        assert peek_state(str(path)).to_json() == state.to_json()  # type: ignore[union-attr]
        assert _check(path, alive=True) == ([], [])
    finally:
        store.close()
    assert _check(path, alive=False) == ([], [])  # stopped without a checkpoint: a kill
    assert _reloaded(path) == state.to_json().decode()


def test_a_step_past_the_allocated_end_extends_the_log_first(
    tmp_path: Path, sync_log: SyncLog
) -> None:
    path = tmp_path / "being"
    store, state = _living(path, 0, log_chunk=CHUNK)
    log = path / redo.REDO_FILE
    extended = 0
    try:
        for index in range(40):  # about 15 KiB of records: three boundaries
            before, allocated = len(sync_log.syncs), log.stat().st_size
            store.commit(state, live_a_step(state, index))
            syncs = [(s.name, s.data_only, s.path) for s in sync_log.syncs[before:]]
            step = ("redo.fsync", True, str(log))
            if log.stat().st_size == allocated:
                assert syncs == [step]  # the common step: one data sync, no size change
            else:
                extended += 1
                assert syncs == [("redo-extend.fsync", True, str(log)), step]
                assert log.stat().st_size % CHUNK == allocated % CHUNK
            assert sync_log.problems(path) == []
        assert peek_state(str(path)).to_json() == state.to_json()  # type: ignore[union-attr]
        assert _check(path, alive=True) == ([], [])
    finally:
        store.close()
    assert extended >= 2
    assert _reloaded(path) == state.to_json().decode()


@pytest.mark.parametrize("point", ["redo-extend.write", "redo-extend.fsync"])
def test_a_failed_extension_fails_the_step_and_loses_no_earlier_one(
    tmp_path: Path, point: str
) -> None:
    path = tmp_path / "being"
    store, state = _living(path, 0, log_chunk=CHUNK)
    durable = state.to_json()
    fsio.arm_failpoints(f"{point}=eio")
    try:
        with pytest.raises(FatalIoError, match=r"cannot append to state\.redo"):
            for index in range(40):
                store.commit(state, live_a_step(state, index))
                durable = state.to_json()
    finally:
        fsio.arm_failpoints("")
        store.close()
    assert _check(path, alive=False) == ([], [])
    assert _reloaded(path) == durable.decode()


def test_a_torn_record_followed_by_zeros_is_a_step_cut_short(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "being"
    store, state = _living(path, 3)
    store.close()
    log = path / redo.REDO_FILE
    data = log.read_bytes()
    used = data.rstrip(b"\0")
    step = redo.encode_record(4, 0, b"", b'{"x":1}')
    for cut in (1, len(step) // 2, len(step) - 1):  # head, body and newline cut short
        log.write_bytes(used + step[:cut] + data[len(used) + cut :])
        assert redo.scan(log.read_bytes()).torn_bytes == cut
        assert _check(path, alive=True) == (
            [],
            [f"state.redo ends with a torn record of {cut} bytes"],
        )
    caplog.set_level(logging.WARNING)
    assert _reloaded(path) == state.to_json().decode()
    assert f"cut a torn record of {len(step) - 1} bytes from state.redo" in caplog.text
    assert redo.scan(log.read_bytes()).torn_bytes == 0  # the boot's checkpoint started anew


def test_a_non_zero_byte_after_the_unused_space_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "being"
    store, _ = _living(path, 3)
    store.close()
    log = path / redo.REDO_FILE
    data = log.read_bytes()
    used = data.rstrip(b"\0")
    damaged = used + b"\0" * 100 + b"R 4 1"
    log.write_bytes(damaged + data[len(damaged) :])
    with pytest.raises(redo.RedoCorrupt, match="data after its unused space"):
        redo.scan(log.read_bytes())
    assert _check(path, alive=False)[0] == [
        f"state: state.redo has data after its unused space at byte {len(used)}"
    ]
    last = used.rindex(b"\nR 3 ") + 1  # a damaged record, then zeros, then a byte
    broken = used[:last] + b"R 3 x\n" + used[last:] + b"\0" * 10 + b"y"
    log.write_bytes(broken + data[len(broken) :])
    with pytest.raises(redo.RedoCorrupt, match="damaged record"):
        redo.scan(log.read_bytes())


def test_a_log_without_a_zero_tail_reads_and_replays(tmp_path: Path) -> None:
    """As the previous version wrote it: the records, and the file ends there."""
    path = tmp_path / "being"
    store, state = _living(path, 3)
    store.close()
    log = path / redo.REDO_FILE
    log.write_bytes(log.read_bytes().rstrip(b"\0"))
    assert len(redo.scan(log.read_bytes()).records) == 3
    assert peek_state(str(path)).to_json() == state.to_json()  # type: ignore[union-attr]
    assert _check(path, alive=False) == ([], [])
    log.write_bytes(log.read_bytes() + b"R 4 1")
    assert redo.scan(log.read_bytes()).torn_bytes == 5
    assert _reloaded(path) == state.to_json().decode()
    assert (path / "state.json").read_bytes() == state.to_json()


def test_verify_is_clean_beside_a_living_being_and_after_it_stops(tmp_path: Path) -> None:
    """A real being's cycle of tool rounds: `verify` beside it, then after it stopped
    without a checkpoint (as a kill leaves it), finds nothing."""
    with ScriptedServer([Turn.text("born")]) as server:
        live_one_cycle(tmp_path, server)
    script = [
        Turn.tool_call(REMEMBER, {"kind": "k", "text": "t"}),
        Turn.tool_call(REMEMBER, {"kind": "k", "text": "u"}),
        Turn.text("done"),
    ]
    path = str(tmp_path / "being")
    with ScriptedServer(script) as server:

        async def cycle() -> Findings:
            runtime = boot(tmp_path, server, resume="true")
            assert (await runtime.once()).status == "completed"
            living = inspect_state_dir(path)
            runtime.being.close()
            return living

        living = run(cycle())
    assert living.alive and (living.problems, living.warnings) == ([], [])
    assert redo.scan((tmp_path / "being" / redo.REDO_FILE).read_bytes()).records
    stopped = inspect_state_dir(path)
    assert not stopped.alive and (stopped.problems, stopped.warnings) == ([], [])


def test_a_record_written_without_its_sync_is_seen_not_durable(
    tmp_path: Path, sync_log: SyncLog
) -> None:
    """The file's size does not change with a step: the sync checks count the log's bytes
    in use, so a record written and not synced is still caught."""
    path = tmp_path / "being"
    store, _ = _living(path, 2)
    try:
        assert sync_log.problems(path) == []
        log = path / redo.REDO_FILE
        fd = os.open(log, os.O_WRONLY)
        try:
            os.pwrite(fd, redo.encode_record(3, 0, b"", b"{}"), len(_used(log)))
        finally:
            os.close(fd)
        assert [p for p in sync_log.problems(path) if p.startswith(str(log))] == [
            f"{log}: content not synced at {log.stat().st_size} bytes"
        ]
    finally:
        store.close()


def test_the_log_stamp_moves_with_every_step_though_the_size_does_not(tmp_path: Path) -> None:
    path = tmp_path / "being"
    store, state = _living(path, 1)
    log = str(path / redo.REDO_FILE)
    try:
        stamps = [redo.log_stamp(log)]
        for index in range(3):
            size = os.stat(log).st_size
            store.commit(state, live_a_step(state, 10 + index))
            assert os.stat(log).st_size == size
            stamps.append(redo.log_stamp(log, since=stamps[-1]))
            assert stamps[-1] == redo.log_stamp(log)  # read forward: the same end
        assert len({stamp[1] for stamp in stamps if stamp}) == 4
        store.checkpoint(state)
        assert redo.log_stamp(log, since=stamps[-1]) == redo.log_stamp(log) != stamps[-1]
    finally:
        store.close()
    assert redo.log_stamp(str(tmp_path / "none")) is None
