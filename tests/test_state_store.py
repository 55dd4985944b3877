"""The state store: one suite run against both backends (a directory, a real PostgreSQL).

What a step commits is what a reopened store loads, byte for byte (`state.json`'s
rendering); the activity journal and the archive keep every event and message in order;
a second runtime is refused while the first holds the being; the change tracker writes
only what changed and its replay rebuilds the same being from any sequence of changes.
The directory backend checkpoints by itself at its record count and once its log
outgrows twice `state.json`; a PostgreSQL step of a full being writes only its own rows,
and the activity journal there refuses every UPDATE and DELETE.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from singularity.domain.records import ChildRecord, MemoryEntry, Source
from singularity.domain.state import AgentState
from singularity.errors import StateLockedError
from singularity.jsoncodec import compact, compact_utf8, loads_strict
from singularity.store.base import state_of
from singularity.store.changes import Changes, Tracker, apply_changes
from singularity.store.directory import DirectoryStore, check_log, peek_state
from singularity.store.postgres.store import PostgresStore
from tests.support.reached import Reached
from tests.support.stores import (
    AT,
    BACKENDS,
    a_being,
    archive_overflow,
    live_a_step,
    new_place,
    open_store,
    store_url,
)
from tests.support.syncs import SyncLog


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_new_being_is_none_until_its_first_commit(backend: str, tmp_path: Path) -> None:
    place = new_place(backend, tmp_path)
    store = open_store(backend, place)
    try:
        assert store.load() is None
        state = a_being(place if backend == "postgresql" else "local")
        store.commit(state, [{"type": "started", "at": AT}])
    finally:
        store.close()
    again = open_store(backend, place)
    try:
        loaded = again.load()
        assert loaded is not None and loaded.to_json() == state.to_json()
        assert again.events_at_open == [{"type": "started", "at": AT}]
    finally:
        again.close()


def test_every_step_reads_back_exactly(backend: str, tmp_path: Path) -> None:
    place = new_place(backend, tmp_path)
    store = open_store(backend, place)
    state = a_being()
    journal = [{"type": "started", "at": AT}]
    try:
        store.load()
        store.commit(state, journal)
        for index in range(30):
            events = live_a_step(state, index)
            if index % 7 == 6:
                archive_overflow(state, keep=5)
            if index == 10:
                state.mind.system_prompt = "a new prompt"
                state.mind.rules.append("never rush")
                state.mind.children.append(
                    ChildRecord(
                        id=str(uuid.uuid4()),
                        name="Kid",
                        ticker="KID",
                        state_dir="children/x",
                        created_at=AT,
                        status="running",
                    )
                )
            if index == 20:
                state.mind.children[0].status = "withdrawn"  # changed in place, as spawning does
            store.commit(state, events)
            journal += events
        archived = store.archived()
    finally:
        store.close()
    reopened = open_store(backend, place)
    try:
        loaded = reopened.load()
        assert loaded is not None
        assert loaded.to_json() == state.to_json()
        assert reopened.events_at_open == journal
        assert len(archived) == state.mind.conversation_archived > 0
        assert reopened.archived() == archived
        assert reopened.archived(2, 4) == archived[2:4]
    finally:
        reopened.close()


def test_a_second_runtime_is_refused_while_the_first_holds_the_being(
    backend: str, tmp_path: Path
) -> None:
    place = new_place(backend, tmp_path)
    first = open_store(backend, place)
    try:
        with pytest.raises(StateLockedError, match="another runtime owns"):
            open_store(backend, place)
    finally:
        first.close()
    open_store(backend, place).close()  # released at close: the next one takes it at once


def test_a_memory_import_that_replaces_the_list_is_committed_whole(
    backend: str, tmp_path: Path
) -> None:
    place = new_place(backend, tmp_path)
    store = open_store(backend, place)
    state = a_being()
    try:
        store.load()
        store.commit(state, [])
        for index in range(3):
            store.commit(state, live_a_step(state, index))
        state.mind.memories = [m.model_copy(deep=True) for m in state.mind.memories]
        state.mind.memories[0].sources.append(Source(kind="file", source_id="s", item_id="1"))
        state.mind.memories.insert(
            1, MemoryEntry(id="imported", kind="fact", text="from a file", created_at=AT)
        )
        store.commit(state, [])
    finally:
        store.close()
    reopened = open_store(backend, place)
    try:
        loaded = reopened.load()
        assert loaded is not None and loaded.to_json() == state.to_json()
    finally:
        reopened.close()


# The tracker and the replay, on their own.


@st.composite
def step_kinds(draw: st.DrawFn) -> list[str]:
    kinds = st.sampled_from(KINDS)
    return draw(st.lists(kinds, min_size=1, max_size=25))


KINDS = (
    "call",
    "archive",
    "prompt",
    "rule",
    "import",
    "copies",
    "edit",
    "child",
    "status",
    "identity",
    "nothing",
)


def _replayed(steps: list[str]) -> Iterator[tuple[bytes, bytes, str]]:
    """Live the steps; after each, the live rendering, the replayed one, the step."""
    state = a_being()
    document = loads_strict(state.to_json())
    tracker = Tracker(archives=True)
    tracker.reset(state)
    for index, kind in enumerate(steps):
        archived = state.mind.conversation_archived
        if kind == "call":
            live_a_step(state, index)
        elif kind == "archive":
            archive_overflow(state, keep=3)
        elif kind == "prompt":
            state.mind.system_prompt = f"prompt {index}"
        elif kind == "rule":
            state.mind.rules.append(f"rule {index}")
        elif kind == "import":
            state.mind.memories = [m.model_copy() for m in state.mind.memories][1:]
        elif kind == "copies":  # equal replacements, found equal: the next steps still fit
            state.mind.memories = [m.model_copy() for m in state.mind.memories]
            conversation = state.conversation
            for middle in range(1, len(conversation) - 1):
                conversation[middle] = conversation[middle].copy()
        elif kind == "edit" and state.mind.memories:
            middle = len(state.mind.memories) // 2
            state.mind.memories[middle] = MemoryEntry(
                id=f"edited {index}", kind="fact", text="replaced", created_at=AT
            )
        elif kind == "child":
            _spawn_or_withdraw(state, index)
        elif kind == "status":
            state.status = "running" if state.status != "running" else "stopping"
        elif kind == "identity":  # a frozen record, never walked: replaced, equal or not
            state.identity = state.identity.model_copy(update={"policy_sequence": index % 2})
        found = tracker.diff(state)
        encoded = tracker.encode(found)
        assert encoded == _encoded(found)  # each message encoded once, the same bytes
        changes = Changes.from_json(loads_strict(encoded))
        leaving = state.mind.conversation_archived - archived
        assert changes.archived() == leaving
        oldest = document["conversation"][:leaving]  # the replayed state's, before this step
        assert tracker.dropped_encoded(leaving) == [compact_utf8(message) for message in oldest]
        tracker.take(state, found)
        apply_changes(document, changes)
        yield state.to_json(), state_of(document, "replay").to_json(), kind


def _spawn_or_withdraw(state: AgentState, index: int) -> None:
    """A child record added, or the newest one's status changed in place."""
    children = state.mind.children
    if children and children[-1].status == "running":
        children[-1].status = "withdrawn"
        return
    children.append(
        ChildRecord(
            id=f"child-{index}",
            name="c",
            ticker="C",
            state_dir="/c",
            created_at=AT,
            status="running",
        )
    )


def _encoded(changes: Changes) -> bytes:
    return compact_utf8(changes.to_json())


def test_replaying_the_changes_rebuilds_the_being() -> None:
    reached = Reached(*KINDS)

    @given(steps=step_kinds())
    def one_life(steps: list[str]) -> None:
        for live, replayed, kind in _replayed(steps):
            assert replayed == live
            reached.note(kind)

    one_life()
    reached.assert_all()


def test_an_unchanged_full_being_commits_nothing() -> None:
    state = a_being()
    for index in range(200):
        live_a_step(state, index, memory_bytes=1024)
    tracker = Tracker()
    tracker.reset(state)
    assert not tracker.diff(state)
    live_a_step(state, 999)
    changes = tracker.diff(state)
    assert set(changes.lists) == {"conversation", "recent_actions", "mind.memories"}
    assert all(len(change.added) <= 2 for change in changes.lists.values())
    assert set(changes.fields) == {"budget"}


def test_a_step_after_equal_replacements_logs_only_what_it_did() -> None:
    state = a_being()
    for index in range(50):
        live_a_step(state, index)
    archive_overflow(state, keep=40)
    tracker = Tracker()
    tracker.reset(state)
    state.conversation[:] = [dict(message) for message in state.conversation]
    state.mind.memories = [memory.model_copy() for memory in state.mind.memories]
    live_a_step(state, 999)
    archive_overflow(state, keep=40)
    changes = tracker.diff(state)
    assert all(len(change.added) <= 2 for change in changes.lists.values()), changes
    assert changes.lists["conversation"].dropped == 2


def test_diff_leaves_the_image_as_it_was_until_take() -> None:
    state = a_being()
    for index in range(30):
        live_a_step(state, index)
    tracker = Tracker()
    tracker.reset(state)
    live_a_step(state, 100)
    archive_overflow(state, keep=20)
    first = tracker.diff(state)
    assert tracker.diff(state) == first  # compared in place, then put back
    tracker.take(state, tracker.diff(state))
    assert not tracker.diff(state)
    live_a_step(state, 101)
    changes = tracker.diff(state)
    assert [len(change.added) for change in changes.lists.values()] == [2, 1, 1]


# The directory backend's log, as `verify` reads it.


def _living_directory(tmp_path: Path, steps: int) -> tuple[DirectoryStore, AgentState]:
    store = DirectoryStore.open(str(tmp_path / "being"))
    state = a_being()
    store.load()
    store.commit(state, [{"type": "started", "at": AT}])
    for index in range(steps):
        store.commit(state, live_a_step(state, index))
    return store, state


def test_the_current_state_is_the_checkpoint_with_the_log_replayed(tmp_path: Path) -> None:
    store, state = _living_directory(tmp_path, 4)
    try:
        path = tmp_path / "being"
        assert peek_state(str(path)).to_json() == state.to_json()  # type: ignore[union-attr]
        assert (path / "state.json").read_bytes() != state.to_json()  # the log holds 4 steps
        store.checkpoint(state)
        assert (path / "state.json").read_bytes() == state.to_json()
        assert (path / "state.redo").read_bytes().count(b"\n") == 1  # the header alone
    finally:
        store.close()


def test_verify_reads_the_log_and_names_what_is_wrong(tmp_path: Path) -> None:
    store, _ = _living_directory(tmp_path, 3)
    store.close()  # no checkpoint: as a kill leaves it
    path = tmp_path / "being"
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        assert check_log(dir_fd, str(path), alive=False) == ([], [])
        log_file = path / "state.redo"
        data = log_file.read_bytes()
        log_file.write_bytes(data + b"R 4 1")  # a record cut short by a crash
        assert check_log(dir_fd, str(path), alive=True) == (
            [],
            ["state.redo ends with a torn record of 5 bytes"],
        )
        assert check_log(dir_fd, str(path), alive=False)[0] == [
            "state.redo ends with a torn record of 5 bytes"
        ]
        activity = path / "activity.jsonl"
        lines = activity.read_bytes()
        activity.write_bytes(lines[:-40])  # a crash lost lines the log holds
        assert "the next boot writes them back" in check_log(dir_fd, str(path), alive=True)[1][1]
        activity.write_bytes(lines.replace(b"remember", b"remembeR"))
        assert check_log(dir_fd, str(path), alive=True)[0] == [
            "activity.jsonl differs from the lines state.redo logged"
        ]
        middle = data.index(b"\nR 2 ") + 1
        log_file.write_bytes(data[:middle] + b"R 2 x\n" + data[middle:])
        assert "damaged record" in check_log(dir_fd, str(path), alive=True)[0][0]
    finally:
        os.close(dir_fd)


def test_a_boot_writes_back_what_a_crash_lost_and_checkpoints(
    tmp_path: Path, sync_log: SyncLog
) -> None:
    store, state = _living_directory(tmp_path, 5)
    archive_overflow(state, keep=2)
    store.commit(state, [])
    store.close()
    path = tmp_path / "being"
    lines = (path / "activity.jsonl").read_bytes()
    (path / "activity.jsonl").write_bytes(lines[: len(lines) // 2])
    (path / "conversation.jsonl").write_bytes(b"")
    reopened = DirectoryStore.open(str(path))
    try:
        loaded = reopened.load()
        assert loaded is not None and loaded.to_json() == state.to_json()
        assert (path / "activity.jsonl").read_bytes() == lines
        assert len(reopened.archived()) == state.mind.conversation_archived == 8
        assert (path / "state.json").read_bytes() == state.to_json()  # checkpointed at boot
        # The checkpoint emptied the log: what was written back must be durable by itself.
        assert sync_log.problems(path) == []
    finally:
        reopened.close()


def test_a_torn_last_line_beside_an_empty_log_is_cut_at_boot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No step logged since the checkpoint: a torn last journal line, of any length, is cut
    off and reported, and the next step's lines start on a clean line."""
    started = [{"type": "started", "at": AT}]
    step = [{"type": "cycle_started", "at": AT, "cycle": 1}]
    line = compact_utf8(step[0]) + b"\n"
    for cut in range(1, len(line)):  # every torn length, up to the newline
        path = tmp_path / f"being-{cut}"
        state = a_being()
        store = DirectoryStore.open(str(path))
        assert store.load() is None
        store.commit(state, started)  # a first commit checkpoints: state.redo is empty
        store.close()
        journal = path / "activity.jsonl"
        complete = journal.read_bytes()
        journal.write_bytes(complete + line[:cut])
        caplog.clear()
        store = DirectoryStore.open(str(path))
        try:
            assert store.load() is not None
            assert journal.read_bytes() == complete, cut
            assert store.events_at_open == started, cut
            assert f"cut a torn last line of {cut} bytes from activity.jsonl" in caplog.text
            store.commit(state, step)
        finally:
            store.close()
        assert journal.read_bytes() == complete + line, cut


# When the directory backend checkpoints by itself, and what a PostgreSQL step writes.


def _records(path: Path) -> int:
    """How many records `state.redo` holds (each opens with its `R <seq> …` line)."""
    return sum(line.startswith(b"R ") for line in (path / "state.redo").read_bytes().split(b"\n"))


def test_the_log_is_checkpointed_at_its_record_count(tmp_path: Path) -> None:
    path = tmp_path / "being"
    store = DirectoryStore.open(str(path), checkpoint_records=5)
    try:
        state = a_being()
        assert store.load() is None
        store.commit(state, [{"type": "started", "at": AT}])  # a first commit checkpoints
        for index in range(4):
            store.commit(state, live_a_step(state, index))
        assert (path / "state.json").read_bytes() != state.to_json()
        assert _records(path) == 4
        store.commit(state, live_a_step(state, 4))  # the fifth record
        assert (path / "state.json").read_bytes() == state.to_json()
        assert _records(path) == 0
    finally:
        store.close()


def test_the_log_is_checkpointed_once_it_outgrows_twice_the_state(tmp_path: Path) -> None:
    path = tmp_path / "being"
    store = DirectoryStore.open(str(path), checkpoint_bytes=1)  # the bound: 2 × state.json
    checkpoints = 0
    try:
        state = a_being()
        store.load()
        store.commit(state, [{"type": "started", "at": AT}])
        for index in range(80):
            before = (path / "state.json").read_bytes()
            store.commit(state, live_a_step(state, index, memory_bytes=512))
            written = (path / "state.json").read_bytes()
            if written != before:
                checkpoints += 1
                assert written == state.to_json()
            assert (path / "state.redo").stat().st_size <= 2 * len(written)
    finally:
        store.close()
    assert checkpoints >= 2


def test_a_step_of_a_full_being_in_postgres_writes_only_what_changed(tmp_path: Path) -> None:
    agent = new_place("postgresql", tmp_path)
    store = open_store("postgresql", agent)
    try:
        state = a_being(agent)
        store.load()
        for index in range(150):
            live_a_step(state, index, memory_bytes=256)
        store.commit(state, [{"type": "started", "at": AT}])
        store.commit(state, live_a_step(state, 150))
    finally:
        store.close()
    with psycopg.connect(store_url(), autocommit=True) as db:
        written = {
            table: db.execute(
                f"SELECT count(*) FROM singularity.{table} t WHERE t.agent_id = %s AND "
                "t.xmin = (SELECT b.xmin FROM singularity.beings b WHERE b.agent_id = %s)",
                (agent, agent),
            ).fetchone()
            for table in ("memories", "messages", "actions", "activity")
        }
        held = db.execute(
            "SELECT count(*) FROM singularity.memories WHERE agent_id = %s", (agent,)
        ).fetchone()
    # The last step's transaction wrote its memory, its two messages, its action and its two
    # events, whatever the being already held.
    assert written == {"memories": (1,), "messages": (2,), "actions": (1,), "activity": (2,)}
    assert held == (151,)


def test_a_step_in_postgres_leaves_the_lease_row_to_the_renewer(tmp_path: Path) -> None:
    # The step locks the lease's row to check it; only the renewer rewrites it.
    agent = new_place("postgresql", tmp_path)
    store = open_store("postgresql", agent)
    lease_row = "SELECT xmin::text, expires_at FROM singularity.leases WHERE agent_id = %s"
    try:
        state = a_being(agent)
        store.load()
        store.commit(state, [{"type": "started", "at": AT}])
        with psycopg.connect(store_url(), autocommit=True) as db:
            before = db.execute(lease_row, (agent,)).fetchone()
            for index in range(3):
                store.commit(state, live_a_step(state, index))
            assert db.execute(lease_row, (agent,)).fetchone() == before
    finally:
        store.close()


def test_a_step_in_postgres_survives_the_session_losing_its_prepared_statements(
    tmp_path: Path,
) -> None:
    # psycopg deallocates every statement of the session after a rollback, the step's too.
    agent = new_place("postgresql", tmp_path)
    store = PostgresStore.open(store_url(), agent)
    state = a_being(agent)
    try:
        store.load()
        store.commit(state, [{"type": "started", "at": AT}])
        store.commit(state, live_a_step(state, 0))
        store.db.execute("DEALLOCATE ALL")
        store.commit(state, live_a_step(state, 1))
    finally:
        store.close()
    reopened = open_store("postgresql", agent)
    try:
        loaded = reopened.load()
        assert loaded is not None and loaded.to_json() == state.to_json()
    finally:
        reopened.close()


def test_the_activity_journal_in_postgres_is_append_only(tmp_path: Path) -> None:
    agent = new_place("postgresql", tmp_path)
    store = open_store("postgresql", agent)
    try:
        store.load()
        store.commit(a_being(agent), [{"type": "started", "at": AT}])
    finally:
        store.close()
    with psycopg.connect(store_url(), autocommit=True) as db:
        for statement in (
            "UPDATE singularity.activity SET line = line WHERE agent_id = %s",
            "DELETE FROM singularity.activity WHERE agent_id = %s",
        ):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                db.execute(statement, (agent,))
        kept = db.execute(
            "SELECT count(*) FROM singularity.activity WHERE agent_id = %s", (agent,)
        ).fetchone()
    assert kept == (1,)


# Texts that JSON escapes, or that a second encoding would escape again.
AWKWARD = 'a "quote", a \\ backslash, \\u00e9 as text, é, \U0001f9ed, \u2028, tab\tand\nline'


def test_every_list_of_a_being_in_postgres_reads_back_byte_for_byte(tmp_path: Path) -> None:
    agent = new_place("postgresql", tmp_path)
    store = open_store("postgresql", agent)
    state = a_being(agent)
    journal: list[dict[str, object]] = [{"type": "started", "at": AT, "note": AWKWARD}]
    try:
        store.load()
        store.commit(state, journal)
        for index in range(4):
            events = live_a_step(state, index)
            events.append({"type": "noted", "at": AT, "cycle": state.cycle, "text": AWKWARD})
            state.conversation.append({"role": "user", "zeta": 1.10, "content": AWKWARD, "a": []})
            state.mind.rules.append(f"rule {index}: {AWKWARD}")
            state.mind.learnings.append(f"learning {index}: {AWKWARD}")
            state.created_resources.chat_ids.append(f"chat-{index}-{AWKWARD}")
            state.created_resources.message_ids.append(f"message-{index}")
            state.mind.memories[-1].text = AWKWARD
            if index == 2:  # cut at the front, replaced in the middle, cut at the end
                del state.mind.rules[0]
                state.mind.learnings[1] = "a learning replaced"
                del state.created_resources.message_ids[-2:]
                state.mind.memories[0] = MemoryEntry(
                    id="replaced", kind="fact", text=AWKWARD, created_at=AT
                )
            store.commit(state, events)
            journal += events
    finally:
        store.close()
    reopened = open_store("postgresql", agent)
    try:
        loaded = reopened.load()
        assert loaded is not None and loaded.to_json() == state.to_json()
        assert reopened.events_at_open == journal
    finally:
        reopened.close()
    with psycopg.connect(store_url(), autocommit=True) as db:
        stored = db.execute(
            "SELECT message::text FROM singularity.messages WHERE agent_id = %s ORDER BY seq",
            (agent,),
        ).fetchall()
        lines = db.execute(
            "SELECT line FROM singularity.activity WHERE agent_id = %s ORDER BY seq", (agent,)
        ).fetchall()
    assert [text for (text,) in stored] == [compact(message) for message in state.conversation]
    assert [line for (line,) in lines] == [compact(event) for event in journal]
