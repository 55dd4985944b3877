"""Copying a being, whole, from one state store to another (`singularity export`).

`read_being` takes a being out of an opened store, whose single-writer hold the opening
took (a living being is refused then): its state as the last durable step left it, the
activity journal, the conversation archive and the sanctum. `write_directory` and
`write_postgres` put it where no being lives yet, whole or not at all: a new state
directory filled beside its destination and renamed in, or one transaction. A round trip
renders the same `state.json`, `activity.jsonl`, `conversation.jsonl` and sanctum files,
byte for byte. The source is left as it was: the copy is a second home of the same
being, and only one of them should live.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from singularity.domain.records import ChatMessage
from singularity.domain.state import AgentState
from singularity.errors import StateError
from singularity.sanctum.entries import SanctumEntry, read_folder, write_folder
from singularity.storage import activity, conversation_archive, fsio, publish
from singularity.storage.activity import ACTIVITY_FILE
from singularity.storage.conversation_archive import ARCHIVE_FILE
from singularity.storage.statedir import STATE_FILE
from singularity.store.base import Event, StateStore
from singularity.store.directory import DirectoryStore
from singularity.store.opening import StorePlace, open_store_at

if TYPE_CHECKING:
    from singularity.store.postgres.store import Batch, PostgresStore

POINT = "export"
"""The failpoints of an export: `export.write`, `export.rename`, `export.commit`, …"""
SANCTUM_DIR = "sanctum"


@dataclass
class WholeBeing:
    """Everything a store keeps of one being."""

    state: AgentState
    events: list[Event]
    """The activity journal, oldest first."""
    archived: list[ChatMessage]
    """The messages that left the conversation window, oldest first."""
    sanctum: list[SanctumEntry] | None
    """Its folders and files, parents first; None when it has no sanctum."""


def read_being(store: StateStore, sanctum_root: str | None = None) -> WholeBeing:
    """The being in an opened store; StateError when it holds none.

    The sanctum is the folder `sanctum_root` when given; otherwise a state directory's
    `<state-dir>/sanctum`, a PostgreSQL being's rows.
    """
    state = store.load()
    if state is None:
        where = f"being in {store.label}" if isinstance(store, DirectoryStore) else store.label
        raise StateError(f"no {where}")
    count = state.mind.conversation_archived
    archived = store.archived(0, count)
    if len(archived) != count:
        raise StateError(
            f"{store.label} archived {count} messages but holds {len(archived)} of them"
        )
    return WholeBeing(state, list(store.events_at_open), archived, _sanctum(store, sanctum_root))


def _sanctum(store: StateStore, root: str | None) -> list[SanctumEntry] | None:
    if root is not None:
        return read_folder(root)
    if isinstance(store, DirectoryStore):
        return read_folder(os.path.join(store.statedir.path, SANCTUM_DIR))
    from singularity.store.postgres import sanctum
    from singularity.store.postgres.store import PostgresStore

    if not isinstance(store, PostgresStore):
        raise TypeError(f"no sanctum reader for {type(store).__name__}")
    return sanctum.latest(store.db, store.agent_id)


def write_directory(being: WholeBeing, path: str) -> None:
    """Write the being as a new state directory at `path` (StateError if one is there)."""

    def fill(dir_fd: int) -> None:
        publish.write_new_file(dir_fd, STATE_FILE, being.state.to_json(), POINT)
        publish.write_new_file(dir_fd, ACTIVITY_FILE, activity.encode_lines(being.events), POINT)
        if being.archived:
            lines = conversation_archive.encode_lines(0, being.archived)
            publish.write_new_file(dir_fd, ARCHIVE_FILE, lines, POINT)
        if being.sanctum is not None:
            folder = publish.make_folder(dir_fd, SANCTUM_DIR)
            try:
                write_folder(folder, being.sanctum)
            finally:
                os.close(folder)

    publish.publish_directory(path, fill, what="a being", point=POINT)


def write_postgres(being: WholeBeing, store: PostgresStore) -> None:
    """Write the being into an opened PostgreSQL store that holds no being by its agent id.

    One transaction: the being's row, its lists, its archive, its journal and one
    version of each sanctum entry, or nothing.
    """
    own = being.state.identity.agent_id
    if store.agent_id != own:
        raise StateError(
            f"the being's agent id is {own}, not {store.agent_id}: a being keeps its agent id"
        )
    if store.load() is not None:
        raise StateError(f"{store.label} already exists; export writes only a new being")
    from singularity.store.postgres import sanctum

    def also(batch: Batch) -> None:
        sanctum.add_versions(batch, store.agent_id, being.sanctum or [])
        fsio.failpoint(f"{POINT}.commit")

    store.create(being.state, being.events, being.archived, also)


def copy_being(
    source: StorePlace,
    target: StorePlace,
    agent_id: str | None,
    *,
    sanctum_root: str | None = None,
) -> WholeBeing:
    """Copy the being at `source` to `target`, which must hold none; the being copied.

    `agent_id` selects the being in a PostgreSQL source (required then); of a state
    directory's being it is only checked, when given. The being keeps its agent id in a
    PostgreSQL target. The source's single-writer hold is taken for the whole copy, so a
    living being is refused (`StateLockedError`).
    """
    if source.is_postgres and agent_id is None:
        raise StateError("a being in a PostgreSQL state store is chosen by its agent id")
    if source == target:
        raise StateError(f"{source.shown()} is both the source and the target of the export")
    store = open_store_at(source, agent_id or "", create=False)
    try:
        being = read_being(store, sanctum_root)
        own = being.state.identity.agent_id
        if agent_id is not None and agent_id != own:
            raise StateError(f"the being in {store.label} has the agent id {own}, not {agent_id}")
        if target.is_postgres:
            from singularity.store.postgres.store import PostgresStore

            written = open_store_at(target, own)
            assert isinstance(written, PostgresStore)
            try:
                write_postgres(being, written)
            finally:
                written.close()
        else:
            write_directory(being, target.location)
    finally:
        store.close()
    return being
