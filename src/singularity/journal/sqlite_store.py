"""The default backend: `<state-dir>/journal.sqlite3`, 0600, WAL, synchronous=FULL.

Vectors are encrypted like the text they were made from (AES-256-GCM under the row's
key, through the journal's keyring): the file alone says nothing of what an entry means.
Recall decrypts the vectors of one model and runs an exact cosine scan in NumPy; the
decrypted matrix stays in this process's memory between calls and is reloaded when
another connection (the CLI) changed the file. Vectors an older version stored in the
clear are encrypted when the file is opened.
`secure_delete` zeroes deleted rows; after a purge the WAL is checkpointed and
truncated, and the file is vacuumed once enough pages are free, so deleted ciphertext
does not linger in free pages or old WAL frames.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from singularity.journal.keyring import NONCE_BYTES, TAG_BYTES, Keyring, Unreadable
from singularity.journal.records import (
    EVERYTHING,
    Filter,
    JournalError,
    Row,
    Vector,
    from_micros,
    to_micros,
)

COLUMNS = (
    "id, created_us, mood, ciphertext, nonce, key_id, embedding, embedding_model, "
    "embedded_us, thread_id, seq, redacted, promoted, promoted_us, promoted_ref"
)
SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id TEXT PRIMARY KEY,
    created_us INTEGER NOT NULL,
    mood TEXT,
    ciphertext BLOB NOT NULL,
    nonce BLOB NOT NULL,
    key_id TEXT NOT NULL,
    embedding BLOB,
    dims INTEGER,
    embedding_model TEXT,
    embedded_us INTEGER,
    thread_id TEXT,
    seq INTEGER,
    redacted INTEGER NOT NULL DEFAULT 0,
    promoted INTEGER NOT NULL DEFAULT 0,
    promoted_us INTEGER,
    promoted_ref TEXT
);
CREATE INDEX IF NOT EXISTS entries_created ON entries (created_us);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
SELECTED = COLUMNS + ", dims"
VACUUM_FREE_FRACTION = 0.1


def _optional_us(moment: datetime | None) -> int | None:
    return None if moment is None else to_micros(moment)


def _optional_time(micros: int | None) -> datetime | None:
    return None if micros is None else from_micros(micros)


def _clear(blob: bytes, dims: int | None) -> bool:
    """Whether a stored vector is in the clear (as an older version wrote it)."""
    return dims is not None and len(blob) == 4 * dims


def _dims(row: Row) -> int | None:
    if row.embedding is not None:
        return len(row.embedding)
    if row.sealed_embedding is not None:
        return (len(row.sealed_embedding) - NONCE_BYTES - TAG_BYTES) // 4
    return None


def row_of(record: tuple[Any, ...]) -> Row:
    """A row of `SELECT {SELECTED}` as a `Row` (its vector still sealed)."""
    (ident, created, mood, cipher, nonce, key_id, blob, model, embedded, thread, seq) = record[:11]
    redacted, promoted, promoted_us, ref, dims = record[11:]
    vector, sealed = None, None
    if blob is not None and _clear(blob, dims):
        vector = np.frombuffer(blob, dtype="<f4").astype(np.float32)
    elif blob is not None:
        sealed = bytes(blob)
    return Row(
        id=ident,
        created_at=from_micros(created),
        ciphertext=bytes(cipher),
        nonce=bytes(nonce),
        key_id=key_id,
        mood=mood,
        embedding=vector,
        sealed_embedding=sealed,
        embedding_model=model,
        embedded_at=_optional_time(embedded),
        thread_id=thread,
        seq=seq,
        redacted=bool(redacted),
        promoted=bool(promoted),
        promoted_at=_optional_time(promoted_us),
        promoted_ref=ref,
    )


def _where(where: Filter, ids: Sequence[str] | None = None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    values: list[Any] = []
    if where.since is not None:
        clauses.append("created_us >= ?")
        values.append(to_micros(where.since))
    if where.before is not None:
        clauses.append("created_us < ?")
        values.append(to_micros(where.before))
    for column, value in (("mood", where.mood), ("thread_id", where.thread_id)):
        if value is not None:
            clauses.append(f"{column} = ?")
            values.append(value)
    if where.key_id is not None:
        clauses.append("key_id = ?")
        values.append(where.key_id)
    if where.lacking_model is not None:
        clauses.append("NOT redacted AND (embedding_model IS NULL OR embedding_model != ?)")
        values.append(where.lacking_model)
    if ids is not None:
        values += ids
        clauses.append(f"id IN ({', '.join('?' * len(ids))})")
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", values


def is_damage(error: BaseException) -> bool:
    """Whether a database error means the file itself is damaged."""
    if not isinstance(error, sqlite3.DatabaseError) or isinstance(
        error, sqlite3.OperationalError | sqlite3.IntegrityError
    ):
        return False
    text = str(error).lower()
    return "malformed" in text or "not a database" in text or "corrupt" in text


@dataclass
class _Vectors:
    """One model's vectors in memory, with what filters need; appends grow by doubling."""

    version: int
    model: str
    ids: list[str]
    moods: list[str | None]
    threads: list[str | None]
    buffer: np.ndarray
    stamps: np.ndarray

    @property
    def matrix(self) -> np.ndarray:
        """The live rows of the buffer."""
        return self.buffer[: len(self.ids)]

    @property
    def created(self) -> np.ndarray:
        """Creation times (microseconds) of the live rows."""
        return self.stamps[: len(self.ids)]

    def append(self, row: Row, vector: np.ndarray) -> None:
        """Add one row without copying the others (amortised)."""
        size = len(self.ids)
        if size == len(self.buffer) or self.buffer.shape[1] != len(vector):
            if self.buffer.shape[1] != len(vector) and size:
                return  # another dimension: never compared, found by reloading
            grown = np.zeros((max(16, 2 * size), len(vector)), dtype=np.float32)
            grown[:size] = self.buffer[:size]
            stamps = np.zeros(len(grown), dtype=np.int64)
            stamps[:size] = self.stamps[:size]
            self.buffer, self.stamps = grown, stamps
        self.buffer[size] = vector
        self.stamps[size] = to_micros(row.created_at)
        self.ids.append(row.id)
        self.moods.append(row.mood)
        self.threads.append(row.thread_id)


def _create_private(path: str) -> None:
    """Make the file 0600 before SQLite opens it; SQLite gives -wal and -shm the same mode."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.close(fd)
    except FileExistsError:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            raise JournalError(f"{path} is not a regular file") from None
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(path, 0o600)


class ForeignDatabase(JournalError):
    """The database file belongs to another journal (another being's key)."""


class SqliteStore:
    """Rows in one SQLite file."""

    backend = "sqlite"

    def __init__(
        self, path: str, connection: sqlite3.Connection, keyring: Keyring | None = None
    ) -> None:
        self.path = path
        self.db = connection
        self.keyring = keyring
        """Seals and opens vectors; without it they are stored in the clear."""
        self.notices: list[str] = []
        self._vectors: _Vectors | None = None

    @classmethod
    def open(cls, path: str, journal_id: str, keyring: Keyring | None = None) -> SqliteStore:
        """Open (creating 0600) the database and its schema; refuse another journal's file.

        With a keyring, vectors are encrypted, those stored in the clear first of all.
        """
        try:
            _create_private(path)
            connection = sqlite3.connect(path, isolation_level=None, timeout=10.0)
            for pragma in ("journal_mode=WAL", "synchronous=FULL", "secure_delete=ON"):
                connection.execute(f"PRAGMA {pragma}")
            connection.executescript(SCHEMA)
            connection.execute(
                "INSERT OR IGNORE INTO meta (name, value) VALUES ('journal_id', ?)", (journal_id,)
            )
            owner = connection.execute(
                "SELECT value FROM meta WHERE name = 'journal_id'"
            ).fetchone()
        except (OSError, sqlite3.Error) as error:
            raise JournalError(f"cannot open {path}: {error}") from None
        if owner[0] != journal_id:
            connection.close()
            raise ForeignDatabase(f"{path} holds another being's journal")
        store = cls(path, connection, keyring)
        if keyring is not None:
            try:
                store.seal_clear_vectors()
            except sqlite3.Error as error:
                if not is_damage(error):  # a damaged file is opened, to be salvaged
                    connection.close()
                    raise JournalError(f"cannot open {path}: {error}") from None
        return store

    def _vector_blob(self, row: Row) -> bytes | None:
        if row.embedding is None:
            return row.sealed_embedding
        data = row.embedding.astype("<f4").tobytes()
        if self.keyring is None:
            return data
        return self.keyring.seal_vector(row.id, row.created_at, row.key_id, data)

    def seal_clear_vectors(self) -> int:
        """Encrypt every vector stored in the clear, then reclaim the space it held."""
        assert self.keyring is not None
        found = self.db.execute(
            "SELECT id, created_us, key_id, embedding FROM entries "
            "WHERE embedding IS NOT NULL AND length(embedding) = 4 * dims"
        ).fetchall()
        sealed = 0
        for ident, created, key_id, blob in found:
            if key_id not in self.keyring.keys:
                continue
            box = self.keyring.seal_vector(ident, from_micros(created), key_id, bytes(blob))
            self.db.execute("UPDATE entries SET embedding = ? WHERE id = ?", (box, ident))
            sealed += 1
        if sealed:
            self._vectors = None
            self.reclaim(force=True)
        return sealed

    def _version(self) -> int:
        return int(self.db.execute("PRAGMA data_version").fetchone()[0])

    def insert(self, row: Row) -> None:
        """Add one row (committed and synced on return)."""
        self.db.execute(
            f"INSERT INTO entries ({COLUMNS}, dims) VALUES ({', '.join('?' * 16)})",
            (
                row.id,
                to_micros(row.created_at),
                row.mood,
                row.ciphertext,
                row.nonce,
                row.key_id,
                self._vector_blob(row),
                row.embedding_model,
                _optional_us(row.embedded_at),
                row.thread_id,
                row.seq,
                int(row.redacted),
                int(row.promoted),
                _optional_us(row.promoted_at),
                row.promoted_ref,
                _dims(row),
            ),
        )
        cache = self._vectors
        vector = row.embedding
        if (
            cache is not None
            and vector is not None
            and not row.redacted
            and row.embedding_model == cache.model
        ):
            cache.append(row, vector)

    def update(self, row: Row) -> None:
        """Write back the mutable fields."""
        self.db.execute(
            "UPDATE entries SET ciphertext = ?, nonce = ?, key_id = ?, embedding = ?, dims = ?, "
            "embedding_model = ?, embedded_us = ?, promoted = ?, promoted_us = ?, "
            "promoted_ref = ? WHERE id = ?",
            (
                row.ciphertext,
                row.nonce,
                row.key_id,
                self._vector_blob(row),
                _dims(row),
                row.embedding_model,
                _optional_us(row.embedded_at),
                int(row.promoted),
                _optional_us(row.promoted_at),
                row.promoted_ref,
                row.id,
            ),
        )
        self._vectors = None

    def rows(self, where: Filter = EVERYTHING, ids: Sequence[str] | None = None) -> list[Row]:
        """Matching rows, oldest first."""
        clause, values = _where(where, ids)
        cursor = self.db.execute(
            f"SELECT {SELECTED} FROM entries{clause} ORDER BY created_us, id", values
        )
        return [row_of(record) for record in cursor]

    def count(self, where: Filter = EVERYTHING) -> int:
        """How many rows match."""
        clause, values = _where(where)
        return int(self.db.execute(f"SELECT count(*) FROM entries{clause}", values).fetchone()[0])

    def _load(self, model: str) -> _Vectors:
        version = self._version()
        cache = self._vectors
        if cache is not None and cache.model == model and cache.version == version:
            return cache
        cursor = self.db.execute(
            "SELECT id, created_us, mood, thread_id, embedding, key_id, dims FROM entries "
            "WHERE embedding_model = ? AND NOT redacted AND embedding IS NOT NULL",
            (model,),
        )
        ids, created, moods, threads, blobs = [], [], [], [], []
        for ident, micros, mood, thread, stored, key_id, dims in cursor:
            blob = self._open_vector(ident, micros, key_id, stored, dims)
            if blob is None:
                continue
            ids.append(ident)
            created.append(micros)
            moods.append(mood)
            threads.append(thread)
            blobs.append(blob)
        matrix = (
            np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1).astype(np.float32)
            if blobs
            else np.zeros((0, 1), dtype=np.float32)
        )
        stamps = np.array(created, dtype=np.int64)
        self._vectors = _Vectors(version, model, ids, moods, threads, matrix, stamps)
        return self._vectors

    def _open_vector(
        self, ident: str, micros: int, key_id: str, stored: bytes, dims: int | None
    ) -> bytes | None:
        """A stored vector's bytes; None when it cannot be opened (its row is unreadable)."""
        if _clear(stored, dims):
            return bytes(stored)
        if self.keyring is None:
            return None
        try:
            return self.keyring.open_vector(ident, from_micros(micros), key_id, bytes(stored))
        except Unreadable:
            return None

    def nearest(self, model: str, vector: Vector, k: int, where: Filter) -> list[tuple[str, float]]:
        """Exact top-k by cosine (vectors are unit length, so by dot product)."""
        cache = self._load(model)
        if not cache.ids or cache.matrix.shape[1] != len(vector):
            return []
        mask = np.ones(len(cache.ids), dtype=bool)
        if where.since is not None:
            mask &= cache.created >= to_micros(where.since)
        if where.before is not None:
            mask &= cache.created < to_micros(where.before)
        if where.mood is not None:
            mask &= np.array([mood == where.mood for mood in cache.moods], dtype=bool)
        if where.thread_id is not None:
            mask &= np.array([t == where.thread_id for t in cache.threads], dtype=bool)
        chosen = np.flatnonzero(mask)
        if not len(chosen):
            return []
        scores = cache.matrix[chosen] @ vector if len(chosen) < len(mask) else cache.matrix @ vector
        top = min(k, len(chosen))
        best = np.argpartition(-scores, top - 1)[:top]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(cache.ids[int(chosen[i])], float(scores[i])) for i in best]

    def purge(self, before: datetime, keep_promoted: bool) -> int:
        """Delete old rows in one transaction, then reclaim their pages."""
        condition = "created_us < ?" + (" AND NOT promoted" if keep_promoted else "")
        gone = self.db.execute(f"DELETE FROM entries WHERE {condition}", (to_micros(before),))
        count = gone.rowcount
        if count:
            self._vectors = None
            self.reclaim()
        return count

    def reclaim(self, force: bool = False) -> None:
        """Vacuum when enough pages are free, then checkpoint and truncate the WAL."""
        free = int(self.db.execute("PRAGMA freelist_count").fetchone()[0])
        pages = int(self.db.execute("PRAGMA page_count").fetchone()[0]) or 1
        if force or (free and free / pages >= VACUUM_FREE_FRACTION):
            self.db.execute("VACUUM")
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def key_ids(self) -> set[str]:
        """Key ids still in use."""
        return {kid for (kid,) in self.db.execute("SELECT DISTINCT key_id FROM entries")}

    def destroy(self) -> None:
        """Delete everything and reclaim the file's space."""
        self.db.execute("DELETE FROM entries")
        self._vectors = None
        self.reclaim(force=True)

    def close(self) -> None:
        """Close the connection (SQLite checkpoints the WAL on the last close)."""
        self.db.close()
