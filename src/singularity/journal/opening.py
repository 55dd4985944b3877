"""Opening a being's journal, and what happens when it cannot be read as it is.

The keyring is found (the configured key file, unless it serves another being, else
`<state-dir>/journal.key`). When the key is gone but a database remains, the journal is
crypto-shredded: a living being (`recover`) starts a fresh journal and sets the
unreadable file aside; a read-only command says so instead. A database that belongs to
another journal is set aside the same way. Every such step is kept in
`Journal.recoveries` for the activity journal.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC
from typing import TYPE_CHECKING

from singularity.journal import recovery
from singularity.journal.keyring import ForeignKeyFile, Keyring, key_path, load_keyring
from singularity.journal.records import JournalError
from singularity.journal.recovery import Recovery
from singularity.journal.service import Journal, JournalConfig
from singularity.journal.store import JournalStore, is_postgres, open_store, sqlite_path
from singularity.storage import fsio
from singularity.timestamps import Clock, system_clock

if TYPE_CHECKING:
    from singularity.journal.embedders import Embedder

log = logging.getLogger(__name__)


class KeyLost(JournalError):
    """The journal's key is gone: its entries can never be read again."""


def database_path(config: JournalConfig) -> str | None:
    """The SQLite file of the journal (None on PostgreSQL)."""
    return None if is_postgres(config.url) else sqlite_path(config.url, config.state_dir)


def find_keyring(config: JournalConfig, clock: Clock, *, create: bool) -> Keyring | None:
    """The being's keyring (made when `create`), or None when there is none."""
    now = clock().astimezone(UTC)
    path = key_path(config.state_dir, config.key_file)
    try:
        return load_keyring(path, config.being, config.state_dir, now, create=create)
    except ForeignKeyFile:
        own = key_path(config.state_dir, None)
        if os.path.abspath(path) == os.path.abspath(own):
            raise
        log.warning(
            "the journal key file %s serves another being; this one keeps its own: %s", path, own
        )
        return load_keyring(own, config.being, config.state_dir, now, create=create)


def open_journal(
    config: JournalConfig,
    clock: Clock = system_clock,
    *,
    create: bool = True,
    recover: bool | None = None,
    embedder: Embedder | None = None,
) -> Journal | None:
    """Open (or, when allowed, create) a being's journal; None when there is none yet.

    `recover` (default: `create`) lets it start afresh when the key is gone and set aside
    a database it cannot read; without it such a journal raises `KeyLost`.
    """
    from singularity.journal.embedders import make_embedder

    recover = create if recover is None else recover
    now = clock().astimezone(UTC)
    database = database_path(config)
    if database is not None:
        recovery.finish_salvage(database)
    recoveries: list[Recovery] = []
    keyring = find_keyring(config, clock, create=False)
    if keyring is None:
        shredded = database is not None and recovery.exists(database)
        if shredded and not recover:
            raise KeyLost(
                f"the journal key is gone, so the entries in {database} can never be read "
                "again; the being starts a fresh journal at its next start (the old file is "
                "set aside), or run `singularity journal destroy --yes`"
            )
        if not (create or shredded):
            return None
        keyring = find_keyring(config, clock, create=True)
        assert keyring is not None
        if shredded and database is not None:
            recoveries.append(Recovery("key_lost", recovery.set_aside(database, "key_lost", now)))
    store = _open_store(config, keyring, database, recover, recoveries, clock)
    chosen = embedder if embedder is not None else make_embedder(config.embedder)
    journal = Journal(config, keyring, store, chosen, clock)
    journal.recoveries.extend(recoveries)
    return journal


def _open_store(
    config: JournalConfig,
    keyring: Keyring,
    database: str | None,
    recover: bool,
    recoveries: list[Recovery],
    clock: Clock,
) -> JournalStore:
    from singularity.journal.sqlite_store import ForeignDatabase

    try:
        return open_store(config.url, config.state_dir, keyring)
    except ForeignDatabase:
        if not recover or database is None:
            raise
    # Only the being's own file can still be foreign: `open_store` falls back to it.
    own = sqlite_path(None, config.state_dir)
    moved = recovery.set_aside(own, "foreign", clock().astimezone(UTC))
    recoveries.append(Recovery("foreign", moved))
    return open_store(config.url, config.state_dir, keyring)


def remove_files(config: JournalConfig) -> list[str]:
    """Delete the SQLite journal's files, whatever state they are in (never a key file)."""
    removed: list[str] = []
    database = database_path(config)
    if database is None:
        return removed
    paths = [database + suffix for suffix in recovery.SIDECARS]
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        removed.append(os.path.basename(path))
    for directory in {os.path.dirname(os.path.abspath(path)) for path in paths}:
        fsio.sync_dir_at(directory, "journal-remove")
    return removed
