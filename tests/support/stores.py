"""Both state-store backends for one test suite: a directory, or a being in a real PostgreSQL.

`open_store(backend, place)` opens a store the way the runtime does; `place` is a
directory for `directory` and an agent id in the session's PostgreSQL server (started by
`tests/support/postgres.py`) for `postgresql`. `a_being()` is a fresh being's state, and
`live_a_step` changes a state the way one tool call of the loop does; `agent_rows` is
the footprint of an agent id in PostgreSQL (its rows in every table naming one);
`once_free` opens a store as soon as the hold of a runtime that stopped renewing it ends;
`a_started_being` is a new being whose first step is committed, its store open.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import TypeVar

from singularity.config import resolve
from singularity.domain.identity import identity_from
from singularity.domain.records import ActionRecord, MemoryEntry
from singularity.domain.state import AgentState
from singularity.errors import StateLockedError
from singularity.store.base import Event, StateStore
from singularity.store.opening import StorePlace, open_store_at
from tests.support.polling import wait_for
from tests.support.postgres import postgres_server

S = TypeVar("S", bound=StateStore)
BACKENDS = ("directory", "postgresql")
AT = "2026-01-01T00:00:00Z"


def store_url() -> str:
    """The URL of the session's PostgreSQL server."""
    return postgres_server().url


def agent_rows(agent: str) -> dict[str, int]:
    """For every table of the store with an `agent_id` column, the rows that name `agent`."""
    import psycopg

    with psycopg.connect(store_url(), autocommit=True) as db:
        tables = [
            str(table)
            for (table,) in db.execute(
                "SELECT table_name FROM information_schema.columns "
                "WHERE table_schema = 'singularity' AND column_name = 'agent_id' "
                "ORDER BY table_name"
            ).fetchall()
        ]
        return {
            table: int(
                db.execute(
                    f"SELECT count(*) FROM singularity.{table} WHERE agent_id = %s", (agent,)
                ).fetchone()[0]  # type: ignore[index]
            )
            for table in tables
        }


def new_place(backend: str, tmp_path: Path) -> str:
    """A place no being lives in yet: a directory, or a fresh agent id."""
    if backend == "directory":
        return str(tmp_path / f"being-{uuid.uuid4().hex[:8]}")
    return f"agent-{uuid.uuid4().hex[:12]}"


def open_store(backend: str, place: str) -> StateStore:
    """The store of the being at `place`, opened as the runtime opens it."""
    if backend == "directory":
        return open_store_at(StorePlace.directory(place), "local")
    return open_store_at(StorePlace.parse(store_url()), place)


def once_free(open_it: Callable[[], S], place: str, *, interval: float) -> S:
    """`open_it()` retried every `interval` seconds while another runtime's hold on `place`
    (a frozen or killed one's lease, left to run out) refuses it."""
    opened: list[S] = []

    def opens() -> bool:
        try:
            opened.append(open_it())
        except StateLockedError:
            return False
        return True

    wait_for(opens, f"the hold on {place} to run out", interval=interval)
    return opened[0]


def a_being(agent_id: str = "local") -> AgentState:
    """A fresh being's state."""
    settings = resolve({"state_dir": "/nonexistent", "agent_id": agent_id}, environ={})
    return AgentState.new(identity_from(settings), "scripted-model", Decimal("10"), AT)


@contextlib.contextmanager
def a_started_being(backend: str, tmp_path: Path) -> Iterator[tuple[str, StateStore, AgentState]]:
    """A new being's place, its open store and its state, its `started` step committed; the
    store is closed after."""
    place = new_place(backend, tmp_path)
    store = open_store(backend, place)
    state = a_being(place)
    try:
        store.load()
        store.commit(state, [{"type": "started", "at": AT}])
        yield place, store, state
    finally:
        store.close()


def live_a_step(state: AgentState, index: int, *, memory_bytes: int = 64) -> list[Event]:
    """Change the state as one remembering tool call does; the events it journals."""
    state.record_action(ActionRecord(cycle=state.cycle, tool="remember", status="success", at=AT))
    call = f"call_{index}"
    state.conversation.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "remember", "arguments": '{"text":"x"}'},
                }
            ],
        }
    )
    state.conversation.append(
        {"role": "tool", "content": f'{{"n":{index}}}', "tool_call_id": call, "name": "remember"}
    )
    state.mind.remember(
        MemoryEntry(id=str(uuid.uuid4()), kind="note", text="m" * memory_bytes, created_at=AT)
    )
    state.budget.remaining -= Decimal("0.001")
    state.budget.api_spent += Decimal("0.001")
    state.updated_at = AT
    return [
        {"type": "cost_debited", "at": AT, "cycle": state.cycle, "operation_id": call},
        {"type": "tool_finished", "at": AT, "cycle": state.cycle, "tool": "remember"},
    ]


def archive_overflow(state: AgentState, keep: int) -> None:
    """Move all but the newest `keep` messages out of the window, as the being does."""
    leaving = max(0, len(state.conversation) - keep)
    del state.conversation[:leaving]
    state.mind.conversation_archived += leaving
