"""Session notes that ride in a step's redo record: logged, written after the record's
sync, written back by a replay when a crash lost them, never twice."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from singularity.domain.state import AgentState
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.sanctum.riding import RidingSanctum
from singularity.sanctum.store import ensure_root
from singularity.store import redo
from singularity.store.directory import DirectoryStore, check_log
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.failpoints import armed_environment
from tests.support.loop_http import all_events
from tests.support.sanctum import being_args, sessions_of
from tests.support.stores import AT, a_being, live_a_step

NOTES = ("memory", "sessions", "2026-01-01-runtime.md")
FIRST = b"---\nauto: true\n---\n\n## Cycle 1 (a, b)\n\n- Warnings: none\n"
SECOND = b"\n## Cycle 2 (c, d)\n\n- Warnings: none\n"


def _noted(tmp_path: Path) -> tuple[Path, Path, AgentState]:
    """A being that noted two cycles (the first note made the file) and was killed: its
    log holds both notes, and nothing was checkpointed since."""
    being = tmp_path / "being"
    store = DirectoryStore.open(str(being))
    state = a_being()
    store.load()
    store.commit(state, [{"type": "started", "at": AT}])
    root = being / "sanctum"
    ensure_root(str(root))
    sanctum = RidingSanctum(str(root), store)
    try:
        sanctum.make_dir(NOTES[:-1])
        for index, note in enumerate((FIRST, SECOND)):
            sanctum.append(NOTES, note, create=True)
            assert (root.joinpath(*NOTES)).exists() == (index > 0)  # written with the step
            assert sanctum.read_bytes(NOTES).endswith(note)  # but read at once
            store.commit(state, live_a_step(state, index))
            assert root.joinpath(*NOTES).read_bytes().endswith(note)
    finally:
        sanctum.close()
        store.close()  # no checkpoint: as a kill leaves it
    return being, root.joinpath(*NOTES), state


def _boot(being: Path) -> AgentState | None:
    store = DirectoryStore.open(str(being))
    try:
        return store.load()
    finally:
        store.close()


def test_the_notes_ride_in_the_records_of_their_steps(tmp_path: Path) -> None:
    being, _, _ = _noted(tmp_path)
    scanned = redo.scan((being / redo.REDO_FILE).read_bytes())
    assert [(a.root, a.path, a.offset, a.data) for a in scanned.appends] == [
        ("sanctum", "/".join(NOTES), 0, FIRST),
        ("sanctum", "/".join(NOTES), len(FIRST), SECOND),
    ]
    assert len(scanned.records) == 2  # the notes' records are not steps of the state


@pytest.mark.parametrize(
    ("lost", "lacking"),
    [
        (lambda data: b"", 2),  # the made file's bytes lost: only its name is left
        (lambda data: data[: len(FIRST) + 7], 1),  # the second append cut short
        (lambda data: data[: len(FIRST)], 1),  # the second append lost whole
        (lambda data: data, 0),  # nothing lost
    ],
    ids=["empty", "cut-short", "lost-append", "whole"],
)
def test_a_boot_writes_back_what_a_crash_lost_exactly_once(
    tmp_path: Path, lost: Callable[[bytes], bytes], lacking: int
) -> None:
    being, notes, state = _noted(tmp_path)
    notes.write_bytes(lost(notes.read_bytes()))
    dir_fd = os.open(being, os.O_RDONLY)
    try:
        problems, settling = check_log(dir_fd, str(being), alive=True)
        assert problems == []
        assert len(settling) == lacking
    finally:
        os.close(dir_fd)
    booted = _boot(being)
    assert booted is not None and booted.to_json() == state.to_json()
    assert notes.read_bytes() == FIRST + SECOND
    assert redo.scan((being / redo.REDO_FILE).read_bytes()).appends == []  # checkpointed
    _boot(being)
    assert notes.read_bytes() == FIRST + SECOND


def test_a_missing_file_is_made_again_and_a_replay_twice_adds_nothing(tmp_path: Path) -> None:
    being, notes, _ = _noted(tmp_path)
    notes.unlink()
    log_bytes = (being / redo.REDO_FILE).read_bytes()
    _boot(being)
    assert notes.read_bytes() == FIRST + SECOND
    # The same log replayed again (a checkpoint cut short before its new log): no change.
    state_bytes = (being / "state.json").read_bytes()
    (being / redo.REDO_FILE).write_bytes(
        redo.header(redo.checkpoint_id(state_bytes)) + log_bytes[log_bytes.index(b"\n") + 1 :]
    )
    scanned = redo.scan((being / redo.REDO_FILE).read_bytes())
    assert len(scanned.appends) == 2
    store = DirectoryStore.open(str(being))
    try:
        store.appends.logged = list(scanned.appends)
        store.appends.settle()
    finally:
        store.close()
    assert notes.read_bytes() == FIRST + SECOND


def test_a_file_changed_since_is_left_as_it_is_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    being, notes, _ = _noted(tmp_path)
    words = b"the operator's own words, longer than both notes were\n" * 3
    notes.write_bytes(words)
    dir_fd = os.open(being, os.O_RDONLY)
    try:
        problems, _ = check_log(dir_fd, str(being), alive=True)
    finally:
        os.close(dir_fd)
    assert problems == [
        f"{'/'.join(NOTES)} differs from the append state.redo logged",
        f"{'/'.join(NOTES)} differs from the append state.redo logged",
    ]
    with caplog.at_level(logging.WARNING):
        _boot(being)
    assert notes.read_bytes() == words
    assert "cannot write the logged append" in caplog.text


def _once(root: Path, *extra: str, failpoints: str = "") -> subprocess.CompletedProcess[bytes]:
    env = clean_environment()
    with ScriptedServer([Turn.text("a cycle")]) as server:
        return subprocess.run(
            [str(SINGULARITY), "once", *being_args(root, server.url, *extra)],
            env=armed_environment(failpoints, env) if failpoints else env,
            capture_output=True,
            timeout=120,
        )


def _runtime_notes(root: Path) -> str:
    [day] = [text for name, text in sessions_of(root).items() if name.endswith("-runtime.md")]
    return day


def test_a_kill_between_the_notes_record_and_its_write_loses_nothing_and_adds_nothing(
    tmp_path: Path,
) -> None:
    assert _once(tmp_path).returncode == 0  # cycle 1: its note makes the day's file
    before = _runtime_notes(tmp_path)
    # Cycle 2: the closing step's record, its note in it, is synced; the process is killed
    # at the note's write, before a byte of it reaches the file.
    killed = _once(tmp_path, "--resume", failpoints="note.write=kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    being = tmp_path / "being"
    assert _runtime_notes(tmp_path) == before
    [logged] = redo.scan((being / redo.REDO_FILE).read_bytes()).appends
    assert b"\n## Cycle 2 (" in logged.data and logged.offset == len(before.encode())
    assert [
        problem for problem in verify_state_dir(str(being)) if "lacks an append" in problem
    ] == [f"{logged.path} lacks an append state.redo logged (the next boot writes it)"]

    resumed = _once(tmp_path, "--resume")
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert json.loads(resumed.stdout)["cycle"] == 3
    notes = _runtime_notes(tmp_path)
    assert notes.startswith(before)
    assert [notes.count(f"\n## Cycle {cycle} (") for cycle in (1, 2, 3)] == [1, 1, 1]
    assert notes.index("\n## Cycle 2 (") < notes.index("\n## Cycle 3 (")
    noted = [e["cycle"] for e in all_events(tmp_path) if e["type"] == "session_note_auto"]
    assert noted == [1, 2, 3]
    assert verify_state_dir(str(being)) == []
