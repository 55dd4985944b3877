"""Where a being lives, as the options name it, and the one way to open it there.

`--state-dir D` names a state directory; `--state-url U` names either a directory
(a path or a `file://` URL) or a PostgreSQL state store (`postgresql://…`), in which
`--agent-id` selects the being. `StorePlace.parse` (`singularity.state_place`) turns the
option into a place, with a `ConfigurationError` saying what is wrong; then

    open_store_at(place, agent_id)    the being's store, its single-writer hold taken
    peek_state_at(place, agent_id)    its current state, read without the hold
    peek_events_at(place, agent_id)   its activity journal, read without the hold
    holds_being_at(place, agent_id)   whether there is a being, read without the hold

Every command that reaches a being's state goes through these, so the directory and
PostgreSQL backends stay interchangeable behind `StateStore`.
"""

from __future__ import annotations

import os

from singularity.domain.state import AgentState
from singularity.errors import FatalIoError, StateError
from singularity.secrets import os_error_text
from singularity.state_place import StorePlace
from singularity.storage import fsio
from singularity.storage.activity import read_events
from singularity.storage.statedir import STATE_FILE
from singularity.store.base import Event, StateStore
from singularity.store.directory import DirectoryStore, peek_state

__all__ = ["StorePlace", "holds_being_at", "open_store_at", "peek_events_at", "peek_state_at"]


def open_store_at(
    place: StorePlace, agent_id: str, *, create: bool = True, lease_secs: float | None = None
) -> StateStore:
    """Open the being's store and take its single-writer hold; nothing is read yet.

    `create` is for the commands that mean to make a being (`run` and `once` of a new
    one, the target of `export`): a state directory is created (0700), and in PostgreSQL
    the lease of a being the store does not hold yet is taken. Without it the state
    directory must exist, and a PostgreSQL store must hold the being (`NoBeing`
    otherwise, with nothing written: no migration, no lease row). A PostgreSQL store is
    migrated and the being's lease taken (`lease_secs`, by default the store's). A second
    runtime is refused with `StateLockedError` either way.
    """
    if not place.is_postgres:
        return DirectoryStore.open(place.location, create=create)
    from singularity.store.postgres import lease
    from singularity.store.postgres.store import PostgresStore

    seconds = lease.DEFAULT_LEASE_SECS if lease_secs is None else lease_secs
    return PostgresStore.open(place.location, agent_id, lease_secs=seconds, create=create)


def peek_state_at(place: StorePlace, agent_id: str) -> AgentState | None:
    """The being's current state, without its hold and without changing anything; None
    when there is none (a state directory's log replayed in memory, a PostgreSQL store
    read in one read-only transaction)."""
    if not place.is_postgres:
        return peek_state(place.location)
    from singularity.store.postgres.reader import peek_being

    found = peek_being(place.location, agent_id)
    return found.state if found is not None else None


def holds_being_at(place: StorePlace, agent_id: str) -> bool:
    """Whether a being lives at the place, without its hold and without changing anything:
    a state directory holding a `state.json`, a PostgreSQL store holding a row of
    `agent_id` (a store never migrated holds none)."""
    if not place.is_postgres:
        return os.path.isfile(os.path.join(place.location, STATE_FILE))
    import psycopg

    from singularity.store.postgres.census import holds_being
    from singularity.store.postgres.store import connect

    db = connect(place.location)
    try:
        return holds_being(db, agent_id)
    except psycopg.Error as error:
        raise StateError(f"cannot read the state store {place.shown()}: {error}") from None
    finally:
        db.close()


def peek_events_at(place: StorePlace, agent_id: str) -> list[Event]:
    """The being's activity journal as far as it is written, without its hold; empty
    when there is none (a torn last line of `activity.jsonl` is left out)."""
    if place.is_postgres:
        from singularity.store.postgres.reader import peek_being

        found = peek_being(place.location, agent_id)
        return found.events if found is not None else []
    try:
        dir_fd = fsio.open_dir(place.location)
    except FileNotFoundError:
        return []
    except OSError as error:
        raise FatalIoError(f"cannot open {place.location}: {os_error_text(error)}") from None
    try:
        return read_events(dir_fd)
    except OSError as error:
        raise FatalIoError(f"cannot read {place.location}: {os_error_text(error)}") from None
    finally:
        os.close(dir_fd)
