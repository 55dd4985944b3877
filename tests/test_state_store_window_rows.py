"""The conversation window in PostgreSQL: its start rides with the messages, not the being's row.

A full being's step (one message in, the oldest out to the archive) writes no row of
`singularity.beings`; a step that moves the window or cuts its tail without a new message
reads back as exactly. The lists have no foreign key: removing a being removes its rows
and ends its lease, so its holder can write nothing after.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from singularity.domain.state import AgentState
from singularity.store.base import LeaseLost
from singularity.store.postgres.step_function import UNFENCED_LISTS
from tests.support.stores import (
    AT,
    a_being,
    a_started_being,
    archive_overflow,
    new_place,
    open_store,
    store_url,
)

BEING_ROW = "SELECT xmin::text FROM singularity.beings WHERE agent_id = %s"


def a_message(state: AgentState, index: int, *, keep: int) -> None:
    """One tool message in, the oldest out once the window holds `keep` (nothing else)."""
    state.conversation.append({"role": "tool", "content": f"r{index}", "tool_call_id": f"c{index}"})
    archive_overflow(state, keep)


def reads_back(agent: str, state: AgentState) -> None:
    reopened = open_store("postgresql", agent)
    try:
        loaded = reopened.load()
        assert loaded is not None and loaded.to_json() == state.to_json()
        assert len(reopened.archived()) == state.mind.conversation_archived
    finally:
        reopened.close()


def test_a_full_windows_step_in_postgres_writes_no_row_of_the_being(tmp_path: Path) -> None:
    with a_started_being("postgresql", tmp_path) as (agent, store, state):
        for index in range(8):  # each message committed before it leaves, as the being does
            a_message(state, index, keep=5)
            store.commit(state, [])
        with psycopg.connect(store_url(), autocommit=True) as db:
            before = db.execute(BEING_ROW, (agent,)).fetchone()
            for index in range(8, 12):
                a_message(state, index, keep=5)
                store.commit(state, [{"type": "tool_finished", "at": AT}])
            assert db.execute(BEING_ROW, (agent,)).fetchone() == before
    assert state.mind.conversation_archived == 7
    reads_back(agent, state)


def test_a_window_moved_or_cut_without_a_new_message_reads_back(tmp_path: Path) -> None:
    agent = new_place("postgresql", tmp_path)
    state = a_being(agent)
    changes = [
        lambda: state.conversation.extend({"role": "user", "content": f"m{n}"} for n in range(6)),
        lambda: archive_overflow(state, keep=4),  # the window's start alone moves
        lambda: state.conversation.pop(),  # the newest message cut, the start kept
        lambda: a_message(state, 6, keep=4),  # in and out again
        lambda: (state.conversation.pop(), archive_overflow(state, keep=2)),  # both at once
        lambda: archive_overflow(state, keep=0),  # nothing left in the window
        lambda: a_message(state, 7, keep=3),
    ]
    store = open_store("postgresql", agent)
    try:
        store.load()
        store.commit(state, [{"type": "started", "at": AT}])
        for change in changes:
            change()
            store.commit(state, [])
            reads_back_while_held = store.archived()
            assert len(reads_back_while_held) == state.mind.conversation_archived
    finally:
        store.close()
    reads_back(agent, state)


def test_removing_a_being_in_postgres_removes_its_rows_and_ends_its_lease(tmp_path: Path) -> None:
    with a_started_being("postgresql", tmp_path) as (agent, store, state):
        for index in range(4):
            a_message(state, index, keep=2)
            state.mind.rules.append(f"rule {index}")
            store.commit(state, [])
        with psycopg.connect(store_url(), autocommit=True) as db, db.transaction():
            db.execute("SET LOCAL singularity.removing = on")
            db.execute("DELETE FROM singularity.beings WHERE agent_id = %s", (agent,))
        with psycopg.connect(store_url(), autocommit=True) as db:
            for table in ("beings", "leases", *UNFENCED_LISTS):
                left = db.execute(
                    f"SELECT count(*) FROM singularity.{table} WHERE agent_id = %s", (agent,)
                ).fetchone()
                assert (table, left) == (table, (0,))
        a_message(state, 4, keep=2)
        with pytest.raises(LeaseLost):
            store.commit(state, [{"type": "tool_finished", "at": AT}])
    with psycopg.connect(store_url(), autocommit=True) as db:
        left = db.execute(
            "SELECT count(*) FROM singularity.messages WHERE agent_id = %s", (agent,)
        ).fetchone()
    assert left == (0,)
