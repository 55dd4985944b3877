"""Where a being in a PostgreSQL store keeps its state directory (inbox, socket, sanctum).

The runtime that takes a being records its host and the state directory's absolute path
(`singularity.places`), under its lease; the console reads it to hand operator requests
to the being through that directory, as `say` does for a being in a directory.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import psycopg

from singularity.errors import StateError
from singularity.state_place import shown_url
from singularity.store.postgres.census import holds_being
from singularity.store.postgres.store import HOLD, Batch, Connection, PostgresStore, connect

RECORD = """
INSERT INTO singularity.places AS held (agent_id, host, state_dir) VALUES (%s, %s, %s)
ON CONFLICT (agent_id) DO UPDATE
    SET host = EXCLUDED.host, state_dir = EXCLUDED.state_dir, recorded_at = now()
"""

NOT_RECORDED = (
    "{agent} lives in the PostgreSQL state store, which does not record where its state "
    "directory is"
)
ELSEWHERE = "{agent} keeps its state directory {state_dir} on host {host}, not here"
MISSING = "{agent}'s state directory {state_dir} is not on this machine"


@dataclass(frozen=True)
class Place:
    """A being's state directory: the host it is on, and its absolute path there."""

    host: str
    state_dir: str

    @property
    def here(self) -> bool:
        """Whether the directory is on this host."""
        return self.host == socket.gethostname()


def record_place(store: PostgresStore, state_dir: str) -> None:
    """Record this host and `state_dir` (absolute) as the being's, holding its lease."""
    try:
        batch = Batch(store.db)
        batch.execute(HOLD, store.lease.hold_arguments())
        batch.execute(RECORD, (store.agent_id, socket.gethostname(), state_dir))
        batch.run()
    except psycopg.Error as error:
        raise StateError(f"cannot record the state directory of {store.label}: {error}") from None


def place_of(db: Connection, agent_id: str) -> Place | None:
    """The being's recorded state directory; None when none is (or the store predates it)."""
    found = db.execute("SELECT to_regclass('singularity.places')").fetchone()
    if found is None or found[0] is None:
        return None
    row = db.execute(
        "SELECT host, state_dir FROM singularity.places WHERE agent_id = %s", (agent_id,)
    ).fetchone()
    return Place(str(row[0]), str(row[1])) if row is not None else None


def local_dir(db: Connection, agent_id: str) -> tuple[str | None, str | None]:
    """The being's recorded state directory, and why operator requests cannot be handed
    over through it from here (None: they can)."""
    place = place_of(db, agent_id)
    if place is None:
        return None, NOT_RECORDED.format(agent=agent_id)
    if not place.here:
        return place.state_dir, ELSEWHERE.format(agent=agent_id, **vars(place))
    if not os.path.isdir(place.state_dir):
        return place.state_dir, MISSING.format(agent=agent_id, state_dir=place.state_dir)
    return place.state_dir, None


def reachable_dir(url: str, agent_id: str, through: str) -> str:
    """The state directory of the being `agent_id` of the store at `url`, on this host;
    a `StateError` saying why not, then `through` (what goes through it), otherwise."""
    db = connect(url)
    try:
        if not holds_being(db, agent_id):
            raise StateError(f"no being state exists for being {agent_id} in {shown_url(url)}")
        state_dir, reason = local_dir(db, agent_id)
    except psycopg.Error as error:
        raise StateError(f"cannot read the state store {shown_url(url)}: {error}") from None
    finally:
        db.close()
    if state_dir is None or reason is not None:
        raise StateError(f"{reason or NOT_RECORDED.format(agent=agent_id)}: {through}")
    return state_dir
