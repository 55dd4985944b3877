"""Copying a being, whole, from one state store to another (`singularity export`).

`read_being` takes a being out of an opened store, whose single-writer hold the opening
took (a living being is refused then): its state as the last durable step left it, the
activity journal, the conversation archive and the sanctum; `copy_being` adds its private
journal (`singularity.journal.portable`). `write_directory` and `write_postgres` put it
where no being lives yet, whole or not at all: a new state directory filled beside its
destination and renamed in, or one transaction (and, for the private journal, a new local
state directory renamed in once that transaction committed). A round trip renders the
same `state.json`, `activity.jsonl`, `conversation.jsonl`, sanctum files and journal
keyring, byte for byte, and the same journal entries. The source is left as it was: the
copy is a second home of the same being, and only one of them should live.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from singularity.domain.records import ChatMessage
from singularity.domain.state import AgentState
from singularity.errors import ConfigurationError, StateError
from singularity.sanctum.entries import SanctumEntry, read_folder, write_folder
from singularity.storage import activity, conversation_archive, fsio, publish
from singularity.storage.activity import ACTIVITY_FILE
from singularity.storage.conversation_archive import ARCHIVE_FILE
from singularity.storage.statedir import STATE_FILE
from singularity.store.base import Event, StateStore
from singularity.store.directory import DirectoryStore
from singularity.store.opening import StorePlace, holds_being_at, open_store_at

if TYPE_CHECKING:
    from singularity.journal.portable import PortableJournal
    from singularity.store.postgres.store import Batch, PostgresStore

JournalReader = Callable[[AgentState], "PortableJournal | None"]
"""Reads the private journal of the being in this state, where it lives (None: it has none)."""

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
    journal: PortableJournal | None = None
    """Its private journal, when it has one and it was read."""


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
        if being.journal is not None:
            from singularity.journal.portable import write_journal

            write_journal(being.journal, dir_fd)

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
    journal_of: JournalReader | None = None,
    local_dir: str | None = None,
) -> WholeBeing:
    """Copy the being at `source` to `target`, which must hold none; the being copied.

    `agent_id` selects the being in a PostgreSQL source (required then); of a state
    directory's being it is only checked, when given. The being keeps its agent id in a
    PostgreSQL target. The source's single-writer hold is taken for the whole copy, so a
    living being is refused (`StateLockedError`). `journal_of` reads its private journal,
    which goes into a directory target, or for a PostgreSQL target into `local_dir`: the
    new local state directory it will run with (a being with a journal and no such
    directory is refused before anything is written).
    """
    if source.is_postgres and agent_id is None:
        raise StateError("a being in a PostgreSQL state store is chosen by its agent id")
    if source == target:
        raise StateError(f"{source.shown()} is both the source and the target of the export")
    if local_dir is not None and not target.is_postgres:
        raise ConfigurationError(
            "--to-state-dir names the local state directory of a copy in PostgreSQL; a copy "
            "in a state directory keeps its journal there"
        )
    if source.is_postgres and not holds_being_at(source, agent_id or ""):
        raise StateError(f"no {source.label(agent_id or '')}")  # nothing taken or written
    store = open_store_at(source, agent_id or "", create=False)
    try:
        being = read_being(store, sanctum_root)
        own = being.state.identity.agent_id
        if agent_id is not None and agent_id != own:
            raise StateError(f"the being in {store.label} has the agent id {own}, not {agent_id}")
        if journal_of is not None:
            being.journal = journal_of(being.state)
        if target.is_postgres:
            _write_postgres_at(being, target, local_dir)
        else:
            write_directory(being, target.location)
    finally:
        store.close()
    return being


def _write_postgres_at(being: WholeBeing, target: StorePlace, local_dir: str | None) -> None:
    """The being into the PostgreSQL store at `target`; its journal into `local_dir`, which
    is renamed into place only once the store committed."""
    from singularity.store.postgres.store import PostgresStore

    def write() -> None:
        written = open_store_at(target, being.state.identity.agent_id)
        assert isinstance(written, PostgresStore)
        try:
            write_postgres(being, written)
        finally:
            written.close()

    if local_dir is None:
        if being.journal is not None:
            raise StateError(
                f"the being's private journal ({len(being.journal.rows)} entries in "
                f"{being.journal.source}) lives in a local state directory next to a being "
                "in PostgreSQL: name a new one for it with --to-state-dir"
            )
        write()
        return

    def fill(dir_fd: int) -> None:
        if being.journal is not None:
            from singularity.journal.portable import write_journal

            write_journal(being.journal, dir_fd)
        write()

    publish.publish_directory(local_dir, fill, what="a local state directory", point=POINT)
