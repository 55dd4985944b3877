"""A being's private journal, whole, to carry to another state directory (`singularity export`).

What travels is what the journal is made of, never its text: the keyring file as it is
written (its journal id and keys) and every row as the store holds it (ciphertext,
nonce, key id and metadata; vectors opened in memory, so the target's backend seals them
its own way). The entries stay sealed under the same keys: the copy opens them as the
original does, and a ciphertext is still bound to its row and journal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from singularity.errors import StateError
from singularity.journal.embedders import HashingEmbedder
from singularity.journal.keyring import KEY_FILE, Keyring, read_key_file
from singularity.journal.opening import KeyLost, open_journal
from singularity.journal.records import Row
from singularity.journal.service import JournalConfig
from singularity.journal.store import DATABASE_FILE, describe
from singularity.storage import fsio


@dataclass
class PortableJournal:
    """A journal's keyring and rows, taken out of where it lives."""

    keyring_file: bytes
    """The key file, byte for byte."""
    keyring: Keyring
    rows: list[Row]
    """Every entry, oldest first, its vector in the clear."""
    source: str
    """Where it was read, for messages (a path, or a URL without its password)."""


def read_journal(config: JournalConfig) -> PortableJournal | None:
    """The being's journal where `config` says it lives; None when it never wrote one.

    A journal whose key is gone is refused: its entries can never be read again.
    """
    try:
        journal = open_journal(config, create=False, recover=False, embedder=HashingEmbedder())
    except KeyLost as error:
        raise StateError(
            f"{error}; export does not copy a journal that cannot be read (`singularity "
            "journal destroy --yes` removes it)"
        ) from None
    if journal is None:
        return None
    try:
        rows = journal.store.rows()
        for row in rows:
            vector = journal.vector_of(row)
            if vector is None and row.sealed_embedding is not None:
                row.embedding_model = None  # unreadable: embedded again by the copy
            row.embedding, row.sealed_embedding = vector, None
        keyring_file = read_key_file(journal.keyring.path)
        where = describe(config.url, config.state_dir)
        return PortableJournal(keyring_file, journal.keyring, rows, where)
    finally:
        journal.close()


def write_journal(journal: PortableJournal, dir_fd: int) -> None:
    """Write the journal into the new state directory open at `dir_fd`, as the runtime
    looks for it there by default: `journal.key` and `journal.sqlite3`, each synced."""
    from singularity.journal.sqlite_store import SqliteStore
    from singularity.storage import publish

    publish.write_new_file(dir_fd, KEY_FILE, journal.keyring_file, "export")
    # SQLite needs a path: the directory's descriptor names the new directory.
    store = SqliteStore.open(
        f"/proc/self/fd/{dir_fd}/{DATABASE_FILE}", journal.keyring.journal_id, journal.keyring
    )
    try:
        for row in journal.rows:
            store.insert(row)
    finally:
        store.close()
    fd = os.open(DATABASE_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        fsio.sync(fd, "export.journal")
    finally:
        os.close(fd)
