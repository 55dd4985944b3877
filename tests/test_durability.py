"""Everything a being writes is durable before its next model call, tool call and state commit.

A crash test cannot see a missing sync (SIGKILL does not lose the page cache), so these
tests watch the syncs themselves (`tests/support/syncs.py`, docs/testing.md): at each
model call, tool call and state commit, every file under the being's state directory
(sanctum, journal key, reasonlog included) and its workspace must have had its content
synced at its current size and its name synced in its directory.

Contract: one writer per test name below — the state replace, the activity append, the
conversation archive, the sanctum's write-once creates (seed files, raw intake, session
notes) and replaces, the journal key, the reasonlog, workspace files in new folders,
the funding grant of a child and its claim, a new state directory, a sanctum removal —
is durable before the next call; each test proves it reached the writer (the file exists
and was checked after being written). Each step of the I/O seam, truncation and removal
included, is checked on its own too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.domain.state import parse_state
from singularity.runtime.being import open_being
from singularity.runtime.family import children
from singularity.sanctum.store import SanctumStore
from singularity.storage import fsio
from singularity.store import redo
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from tests.support import syncs
from tests.support.children_inproc import open_parent, parent_settings, spawn_call
from tests.support.loop_http import all_events, boot, run
from tests.support.syncs import SyncLog

BIG = "x" * 2000  # a file whose reads push older messages out of a 10-message window


def _life() -> list[Turn]:
    """One cycle that reaches every writer of a being, one tool call per round."""
    calls = [
        Call("singularity_file_write", json.dumps({"path": "new/deep/a.txt", "content": BIG})),
        Call(
            "singularity_sanctum_write",
            json.dumps({"path": "memory/topics/plan.md", "content": "# Plan\n\nship it\n"}),
        ),
        Call(
            "singularity_sanctum_intake",
            json.dumps({"area": "notes", "descriptor": "call", "content": "as given\n"}),
        ),
        Call("singularity_journal_write", json.dumps({"text": "a private thought"})),
        Call("singularity_reasonlog_append", json.dumps({"thought": "a public reason"})),
        Call("singularity_memory_remember", json.dumps({"kind": "fact", "text": "remember this"})),
        *[Call("singularity_file_read", json.dumps({"path": "new/deep/a.txt"}))] * 6,
    ]
    return [Turn.tool_calls(call) for call in calls] + [Turn.text("done for now")]


@dataclass
class Life:
    """What the watched life left: the sync log and the directory it lived in."""

    log: SyncLog
    root: Path


@pytest.fixture(scope="module")
def lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Life]:
    """A being that lived two cycles through every writer, watched at every call."""
    root = tmp_path_factory.mktemp("durability")
    (root / "ws").mkdir()
    with pytest.MonkeyPatch.context() as monkeypatch:
        log = syncs.install(monkeypatch)
        log.watch(monkeypatch, root / "being", root / "ws")

        async def go() -> None:
            runtime = boot(root, server, journal_embedder="hashing", max_tool_rounds="20")
            try:
                runtime.being.window_messages = 10
                await runtime.once()
                await runtime.once()  # its first model call comes after the session note
            finally:
                await runtime.shutdown()

        with ScriptedServer([*_life(), Turn.text("second cycle")]) as server:
            run(go())
    finished = [
        (event["tool"], event["status"])
        for event in all_events(root)
        if event["type"] == "tool_finished"
    ]
    assert len(finished) == len(_life()) - 1
    assert [status for _, status in finished if status != "success"] == [], finished
    yield Life(log, root)
    log.close()


BEING = Path("being")
WRITERS = {
    "state replace": BEING / "state.json",
    "activity append": BEING / "activity.jsonl",
    "conversation archive": BEING / "conversation.jsonl",
    "journal key": BEING / "journal.key",
    "reasonlog append": BEING / "reasonlog.jsonl",
    "sanctum replace": BEING / "sanctum" / "memory" / "topics" / "plan.md",
    "sanctum write-once seed": BEING / "sanctum" / "PERSONA.md",
    "workspace file in new folders": Path("ws") / "new" / "deep" / "a.txt",
    "workspace folder": Path("ws") / "new" / "deep",
}


def test_every_write_is_durable_before_the_next_call(lived: Life) -> None:
    assert lived.log.failures == []
    assert lived.log.moments["model"] >= 14 and lived.log.moments["tool"] == 12
    assert lived.log.moments["state"] >= 14


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_the_writer_was_reached_and_seen_durable(lived: Life, writer: str) -> None:
    path = lived.root / WRITERS[writer]
    assert path.exists(), f"{writer}: {path} was never written"
    assert lived.log.failures_of(path) == []
    assert lived.log.times_checked(path) > 0


def test_everything_is_durable_after_the_checkpoint_of_a_clean_stop(lived: Life) -> None:
    """The checkpoint syncs the journal and the archive before its new `state.json` starts
    an empty log: after it, nothing the being wrote rests on `state.redo` any more."""
    being = lived.root / BEING
    assert redo.scan((being / redo.REDO_FILE).read_bytes()).records == []
    archived = parse_state((being / "state.json").read_bytes()).mind.conversation_archived
    assert archived > 0  # the window really pushed messages out to the archive
    assert lived.log.problems(being) == []
    for name in ("activity.jsonl", "conversation.jsonl"):
        assert lived.log.synced_size(being / name) == (being / name).stat().st_size, name


def test_write_once_creates_of_the_sanctum_are_durable(lived: Life) -> None:
    sanctum = lived.root / BEING / "sanctum"
    [raw] = (sanctum / "raw").iterdir()
    assert [(sync.name, sync.data_only) for sync in lived.log.of(raw)] == [("sanctum.fsync", False)]
    # The first cycle's session note makes the day's file and the second cycle's is appended
    # to it, each riding in its cycle's closing step (`state.redo` holds them, and was
    # checked at the second cycle's calls); the clean stop's checkpoint syncs the file and
    # its folder before it discards the log.
    [note] = (sanctum / "memory" / "sessions").glob("*-runtime.md")
    assert [(sync.name, sync.data_only) for sync in lived.log.of(note)] == [("note.fsync", True)]
    assert "note.dirsync" in [sync.name for sync in lived.log.of(note.parent)]
    for path in (raw, note):
        assert lived.log.failures_of(path) == []
        assert lived.log.times_checked(path) > 0


def test_a_childs_funding_grant_is_durable_when_the_spawn_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync_log: SyncLog
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(children, "child_command", lambda: ["/bin/true"])  # claims nothing
    settings = parent_settings(tmp_path, starting_balance="10")
    being = open_parent(settings)
    try:
        arguments = {"name": "Kid", "ticker": "KID", "specialty": "testing", "budget": "2"}
        outcome = spawn_call(being, settings, arguments)
        assert outcome.status.value == "success", outcome
        # The spawn has answered: the next model call may come now.
        assert sync_log.problems(tmp_path / "parent") == []
    finally:
        being.close()
    child_dir = tmp_path / "parent" / "children" / str(outcome.content["child_id"])
    grant = child_dir / "funding.json"
    assert [sync.name for sync in sync_log.of(grant)] == ["funding.fsync"]
    assert sync_log.times_checked(grant) == 1
    assert sync_log.times_checked(child_dir) == 1  # the new directory's own entry

    # The child claims its grant when it opens: the claim is durable before it lives.
    child = open_being(resolve({"state_dir": str(child_dir), "workspace": "ws"}, environ={}))
    try:
        assert child.state.budget.starting == Decimal(2)
        assert sync_log.problems(child_dir) == []
    finally:
        child.close()
    assert sync_log.times_checked(child_dir / "funding.claimed.json") == 1


def test_a_new_state_directory_is_durable_in_its_parent(tmp_path: Path, sync_log: SyncLog) -> None:
    being = open_being(resolve({"state_dir": str(tmp_path / "a" / "b" / "being")}, environ={}))
    try:
        being.save()
        assert sync_log.problems(tmp_path) == []
    finally:
        being.close()
    assert sync_log.times_checked(tmp_path / "a" / "b" / "being" / "state.json") == 1
    assert sync_log.times_checked(tmp_path / "a") == 1


def test_every_step_of_the_io_seam_leaves_what_it_did_durable(
    tmp_path: Path, sync_log: SyncLog
) -> None:
    """Each `fsio` step, one after the other; after each, nothing under the root is at risk."""
    dir_fd = fsio.open_dir(tmp_path)
    steps: list[str] = []

    def step(name: str) -> None:
        assert sync_log.problems(tmp_path) == [], f"after {name}"
        steps.append(name)

    try:
        fsio.make_dir(dir_fd, "sub", 0o700, point="t")
        step("make_dir")
        fsio.replace_file(dir_fd, "replaced", b"one", temp_prefix=".t-", point="t")
        fsio.replace_file(dir_fd, "replaced", b"two", temp_prefix=".t-", point="t")
        step("replace_file")
        assert fsio.create_file(dir_fd, "once", b"data", temp_prefix=".t-", point="t")
        step("create_file")
        fd = fsio.open_append(dir_fd, "appended", "t")
        try:
            fsio.append_durably(fd, b"first line\nsecond line\n", "t")
            step("append_durably")
            fsio.truncate_durably(fd, len(b"first line\n"), "t")
            step("truncate_durably")
        finally:
            os.close(fd)
        fsio.move_file(dir_fd, "once", "moved", point="t")
        step("move_file")
        fsio.remove_file(dir_fd, "moved", point="t")
        step("remove_file")
    finally:
        os.close(dir_fd)
    assert sorted(os.listdir(tmp_path)) == ["appended", "replaced", "sub"]
    assert (tmp_path / "appended").read_bytes() == b"first line\n"
    assert len(steps) == 7


def test_a_removed_sanctum_file_is_gone_durably(tmp_path: Path, sync_log: SyncLog) -> None:
    store = SanctumStore(str(tmp_path))
    try:
        store.replace(("memory", "old.md"), b"# Old\n")
        assert sync_log.problems(tmp_path) == []
        store.remove(("memory", "old.md"))
        assert sync_log.problems(tmp_path) == []
    finally:
        store.close()
    assert [sync.name for sync in sync_log.of(tmp_path / "memory")][-1] == "sanctum.dirsync"
