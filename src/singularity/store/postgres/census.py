"""Every being a PostgreSQL state store holds, read without any lease (for the console).

`census` lists the beings in one query: each with a stamp that changes whenever a step
of it commits, whether a runtime holds its lease now, how far its activity journal goes
and the ids of its children. The console reads a being again only when its stamp moved,
and its journal only past where it stopped. Nothing here migrates, locks or writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from singularity.domain.records import ChatMessage
from singularity.errors import StateError
from singularity.state_place import shown_url
from singularity.store.base import Event
from singularity.store.postgres import lease as leases
from singularity.store.postgres.migrations import migrated
from singularity.store.postgres.rows import UPDATED, load_json
from singularity.store.postgres.store import Connection

CENSUS = f"""
SELECT b.agent_id, b.xmin::text, {UPDATED}, b.children,
       COALESCE(l.expires_at > now(), false),
       COALESCE((SELECT max(a.seq) FROM singularity.activity a WHERE a.agent_id = b.agent_id), 0)
FROM singularity.beings b LEFT JOIN singularity.leases l USING (agent_id)
ORDER BY b.created_at, b.agent_id
"""


@dataclass(frozen=True)
class Resident:
    """One being of the store as the census saw it."""

    agent_id: str
    stamp: str
    """Changes with every committed step that journals (the row's transaction id, its
    `updated_at` and the newest event's `seq`: a step may leave the being's row alone)."""
    alive: bool
    """A runtime holds the being's lease and it has not expired."""
    activity_seq: int
    """The `seq` of the newest activity event (0: none)."""
    children: tuple[str, ...]
    """The ids of the children the being records."""


def holds_beings(db: Connection) -> bool:
    """Whether the store was ever migrated (a store that was not holds no being)."""
    return migrated(db)


def holds_being(db: Connection, agent_id: str) -> bool:
    """Whether the store holds the being `agent_id`."""
    if not holds_beings(db):
        return False
    found = db.execute("SELECT 1 FROM singularity.beings WHERE agent_id = %s", (agent_id,))
    return found.fetchone() is not None


def census(db: Connection) -> list[Resident]:
    """Every being of the store, oldest first."""
    if not holds_beings(db):
        return []
    residents = []
    for agent_id, xmin, updated_at, children, alive, seq in db.execute(CENSUS).fetchall():
        records: Any = load_json(children)
        ids = tuple(
            str(record["id"])
            for record in records
            if isinstance(record, dict) and isinstance(record.get("id"), str)
        )
        stamp = f"{xmin}:{updated_at}:{seq}"
        residents.append(Resident(agent_id, stamp, bool(alive), int(seq), ids))
    return residents


def events_after(db: Connection, agent_id: str, seq: int) -> list[tuple[int, Event]]:
    """The being's activity events after `seq`, each with its own `seq`."""
    found = db.execute(
        "SELECT seq, line FROM singularity.activity WHERE agent_id = %s AND seq > %s ORDER BY seq",
        (agent_id, seq),
    ).fetchall()
    return [(int(number), load_json(line)) for number, line in found]


def messages_from(db: Connection, agent_id: str, start: int) -> list[ChatMessage]:
    """The being's messages from index `start`, the archive and the window alike."""
    found = db.execute(
        "SELECT message FROM singularity.messages WHERE agent_id = %s AND seq >= %s ORDER BY seq",
        (agent_id, start),
    ).fetchall()
    return [load_json(text) for (text,) in found]


def lease_held(url: str, agent_id: str) -> bool:
    """Whether a runtime holds the being's lease now (read without taking it)."""
    from singularity.store.postgres.store import connect

    db = connect(url)
    try:
        return holds_beings(db) and leases.held(db, agent_id)
    except psycopg.Error as error:
        raise StateError(f"cannot read the state store {shown_url(url)}: {error}") from None
    finally:
        db.close()
