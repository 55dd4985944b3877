"""A being in a PostgreSQL state store, read without its lease (for `show`, `verify`).

Nothing is migrated, locked or written: a store that was never migrated holds no being.
The read is one repeatable-read transaction, so a living being's step is either wholly
in it or not at all.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import psycopg

from singularity.domain.state import AgentState
from singularity.errors import StateError
from singularity.state_place import shown_url
from singularity.store.base import Event, state_of
from singularity.store.postgres import lease as leases
from singularity.store.postgres.census import holds_beings
from singularity.store.postgres.store import connect, read_snapshot


@dataclass
class Peek:
    """A being as one read saw it."""

    state: AgentState
    events: list[Event]
    """The whole activity journal."""
    archived_rows: int
    """How many messages the store holds before the conversation window."""
    alive: bool
    """A runtime holds the being's lease (it has not expired)."""


def peek_being(url: str, agent_id: str) -> Peek | None:
    """The being `agent_id` in the store at `url`; None when the store holds no such being."""
    label = f"being {agent_id} in {shown_url(url)}"
    db = connect(url)
    try:
        if not holds_beings(db):
            return None
        found = read_snapshot(db, agent_id)
        if found is None:
            return None
        archived = db.execute(
            "SELECT count(*) FROM singularity.messages WHERE agent_id = %s AND seq < %s",
            (agent_id, found.document["mind"]["conversation_archived"]),
        ).fetchone()
        alive = leases.held(db, agent_id)
    except psycopg.Error as error:
        raise StateError(f"cannot read {label}: {error}") from None
    finally:
        with contextlib.suppress(psycopg.Error):
            db.close()
    return Peek(
        state=state_of(found.document, label),
        events=found.events,
        archived_rows=int(archived[0]) if archived else 0,
        alive=alive,
    )
