"""The store protocol every journal backend implements, and the choice of backend by URL."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol
from urllib.parse import urlsplit

from singularity.errors import ConfigurationError
from singularity.journal.keyring import Keyring
from singularity.journal.records import EVERYTHING, Filter, JournalError, Row, Vector
from singularity.state_place import check_postgres_url

DATABASE_FILE = "journal.sqlite3"
log = logging.getLogger(__name__)


class JournalStore(Protocol):
    """Rows in, rows out: the store never sees plaintext and never decrypts."""

    backend: str

    @property
    def notices(self) -> list[str]:
        """What the activity journal should say about the store (a connection lost and back);
        the caller empties it."""
        ...

    def insert(self, row: Row) -> None:
        """Add one row durably."""
        ...

    def update(self, row: Row) -> None:
        """Write back a row's ciphertext, key, embedding and promotion fields."""
        ...

    def rows(self, where: Filter = EVERYTHING, ids: Sequence[str] | None = None) -> list[Row]:
        """The rows that match, oldest first (all of `ids` that exist, when given)."""
        ...

    def count(self, where: Filter = EVERYTHING) -> int:
        """How many rows match."""
        ...

    def nearest(self, model: str, vector: Vector, k: int, where: Filter) -> list[tuple[str, float]]:
        """Up to `k` (id, cosine) pairs of unredacted rows embedded by `model`, best first."""
        ...

    def purge(self, before: datetime, keep_promoted: bool) -> int:
        """Delete rows created before `before`, reclaim their space; return how many went."""
        ...

    def key_ids(self) -> set[str]:
        """The key ids some row still needs."""
        ...

    def destroy(self) -> None:
        """Delete every row and reclaim the space."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


def describe(url: str | None, state_dir: str) -> str:
    """Where the journal lives, for people: a path, or a URL without its password."""
    if not url or url.startswith("sqlite:"):
        return sqlite_path(url, state_dir)
    parts = urlsplit(url)
    host = parts.hostname or "local socket"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def sqlite_path(url: str | None, state_dir: str) -> str:
    """The SQLite file a `sqlite:///path` URL (or no URL) names."""
    if not url or url in ("sqlite:", "sqlite://", "sqlite:///"):
        return os.path.join(state_dir, DATABASE_FILE)
    if not url.startswith("sqlite:///"):
        raise ConfigurationError("journal URL must be sqlite:///PATH or postgresql://…")
    return url[len("sqlite://") :]


def is_postgres(url: str | None) -> bool:
    """Whether the URL names a PostgreSQL journal."""
    return bool(url) and str(url).startswith(("postgresql://", "postgres://"))


def open_store(url: str | None, state_dir: str, keyring: Keyring) -> JournalStore:
    """The backend the URL names: SQLite (default; its vectors sealed with the keyring) or
    PostgreSQL with pgvector (its vectors in the clear, for the index)."""
    journal_id = keyring.journal_id
    if is_postgres(url):
        assert url is not None
        try:  # as `--state-url` is checked, and a failure is the journal's, as a connection's is
            check_postgres_url(url, "--journal-url")
        except ConfigurationError as refused:
            raise JournalError(str(refused)) from None
        from singularity.journal.pg_store import PostgresStore

        return PostgresStore.open(url, journal_id)
    from singularity.journal.sqlite_store import ForeignDatabase, SqliteStore

    path = sqlite_path(url, state_dir)
    try:
        return SqliteStore.open(path, journal_id, keyring)
    except ForeignDatabase:
        own = sqlite_path(None, state_dir)
        if path == own:
            raise
        log.warning("the journal database serves another being; using this being's own file")
        return SqliteStore.open(own, journal_id, keyring)
