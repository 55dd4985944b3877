"""The journal as the being and the CLI use it: write, recall, promote, purge, maintain.

Plaintext exists only in this process's memory, for the length of one call: it is
sealed before it reaches the store, and recall decrypts only the top `k` rows.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from singularity.journal import recovery, redaction
from singularity.journal.keyring import Keyring, Unreadable
from singularity.journal.records import (
    MAX_ENTRIES_PER_DAY,
    Filter,
    JournalError,
    Row,
    Vector,
)
from singularity.journal.recovery import Recovery
from singularity.journal.sqlite_store import is_damage
from singularity.journal.store import JournalStore, describe
from singularity.storage import fsio
from singularity.timestamps import Clock, render_timestamp, system_clock

if TYPE_CHECKING:
    from singularity.journal.embedders import Embedder

log = logging.getLogger(__name__)
EMBED_BATCH = 64
T = TypeVar("T")


@dataclass(frozen=True)
class JournalConfig:
    """Where the journal lives and how it behaves."""

    state_dir: str
    being: str = ""
    """The fingerprint of the being the journal serves (its identity and birth time)."""
    url: str | None = None
    key_file: str | None = None
    retention_days: int = 30
    keep_promoted: bool = False
    embedder: str = "auto"


@dataclass(frozen=True)
class Written:
    """What a write did: the id, whether it was blanked, and which categories tripped."""

    entry_id: str
    redacted: bool
    categories: list[str]
    seq: int | None


@dataclass(frozen=True)
class Recalled:
    """One decrypted recall hit (held in memory only)."""

    entry_id: str
    created_at: datetime
    mood: str | None
    score: float | None
    text: str
    thread_id: str | None = None
    seq: int | None = None


@dataclass(frozen=True)
class Verified:
    """What `verify` found: rows read, ids failing authentication, and any file damage."""

    checked: int
    failed: list[str]
    damage: list[str]
    """SQLite's own words on what is wrong with the file (empty when it is sound)."""
    lost: list[str]
    """Ids of rows the damage made unreadable."""
    unreachable: bool
    """Whether rows whose ids are unreadable too may be lost."""

    @property
    def sound(self) -> bool:
        """Whether nothing at all is wrong."""
        return not (self.failed or self.damage or self.lost or self.unreachable)

    def summary(self) -> tuple[int, list[str]]:
        """(rows checked, ids that failed authentication)."""
        return self.checked, self.failed


class CapReached(JournalError):
    """The daily entry cap is used up."""


class Damaged(JournalError):
    """The journal's database file is damaged (salvage reads what is left)."""


def _is_store_error(error: BaseException) -> bool:
    # Checked by module so neither driver is imported just to name its errors.
    module = type(error).__module__
    return isinstance(error, OSError) or module.startswith(("sqlite3", "psycopg"))


@contextmanager
def guarded(action: str) -> Iterator[None]:
    """Database failures as `JournalError`, with no row content in the message."""
    try:
        yield
    except JournalError:
        raise
    except Exception as error:
        if not _is_store_error(error):
            raise
        if is_damage(error):
            raise Damaged(f"cannot {action}: the journal database is damaged") from None
        raise JournalError(f"cannot {action}: {type(error).__name__}") from None


class Journal:
    """One being's journal: keyring, store, embedder, clock and retention."""

    def __init__(
        self,
        config: JournalConfig,
        keyring: Keyring,
        store: JournalStore,
        embedder: Embedder,
        clock: Clock = system_clock,
    ) -> None:
        self.config = config
        self.keyring = keyring
        self.store = store
        self.embedder = embedder
        self.clock = clock
        self.recoveries: list[Recovery] = []
        """What was done to make the journal readable, for the activity journal to record."""

    @property
    def retention(self) -> timedelta:
        """How long an entry lives."""
        return timedelta(days=self.config.retention_days)

    def now(self) -> datetime:
        """The clock's time, at microsecond precision (what the stores keep)."""
        return self.clock().astimezone(UTC)

    def window_start(self) -> datetime:
        """The oldest creation time still inside the retention window."""
        return self.now() - self.retention

    def write(self, text: str, mood: str | None, thread_id: str | None) -> Written:
        """Scan, seal, embed and store one entry (blanked when the scanner finds something)."""
        return self._healing(lambda: self._write(text, mood, thread_id))

    def _write(self, text: str, mood: str | None, thread_id: str | None) -> Written:
        from singularity.journal.embedders import as_vector

        now = self.now()
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        with guarded("write the journal"):
            if self.store.count(Filter(since=day)) >= MAX_ENTRIES_PER_DAY:
                raise CapReached(f"the journal takes at most {MAX_ENTRIES_PER_DAY} entries a day")
            seq = None
            if thread_id is not None:
                seq = (
                    max(
                        (row.seq or 0 for row in self.store.rows(Filter(thread_id=thread_id))),
                        default=0,
                    )
                    + 1
                )
            categories = redaction.scan(text)
            if categories:
                text = ""
            entry_id = str(uuid.uuid4())
            nonce, sealed, key_id = self.keyring.seal(entry_id, now, text)
            row = Row(entry_id, now, sealed, nonce, key_id, mood=mood, thread_id=thread_id, seq=seq)
            if not categories:
                row.embedding = as_vector(self.embedder.embed([text])[0])
                row.embedding_model = self.embedder.name
                row.embedded_at = now
            row.redacted = bool(categories)
            fsio.failpoint("journal.insert")
            self.store.insert(row)
            fsio.failpoint("journal.inserted")
        return Written(entry_id, bool(categories), categories, seq)

    def recall(
        self,
        query: str,
        k: int,
        since: datetime | None = None,
        mood: str | None = None,
        thread_id: str | None = None,
    ) -> tuple[list[Recalled], int]:
        """The best `k` unexpired entries for the query, decrypted; and how many failed."""
        return self._healing(lambda: self._recall(query, k, since, mood, thread_id))

    def _recall(
        self,
        query: str,
        k: int,
        since: datetime | None,
        mood: str | None,
        thread_id: str | None,
    ) -> tuple[list[Recalled], int]:
        from singularity.journal.embedders import as_vector

        start = self.window_start()
        where = Filter(since=max(start, since) if since else start, mood=mood, thread_id=thread_id)
        vector = as_vector(self.embedder.embed([query])[0])
        with guarded("recall from the journal"):
            ranked: list[tuple[str, float | None]] = list(
                self.store.nearest(self.embedder.name, vector, k, where)
            )
            texts: dict[str, str] = {}
            failed = 0
            if len(ranked) < k:
                # Rows without a vector of this model are matched by substring, in memory.
                needle = query.lower()
                lacking = Filter(where.since, None, mood, thread_id, None, self.embedder.name)
                for row in self.store.rows(lacking):
                    try:
                        text = self.keyring.open(row)
                    except Unreadable:
                        continue
                    if needle in text.lower():
                        ranked.append((row.id, None))
                        texts[row.id] = text
                        if len(ranked) == k:
                            break
            rows = {row.id: row for row in self.store.rows(ids=[ident for ident, _ in ranked])}
        found = []
        for ident, score in ranked:
            held = rows.get(ident)
            if held is None:
                continue
            try:
                text = texts.get(ident) or self.keyring.open(held)
            except Unreadable:
                failed += 1
                continue
            found.append(
                Recalled(ident, held.created_at, held.mood, score, text, held.thread_id, held.seq)
            )
        return found, failed

    def vector_of(self, row: Row) -> Vector | None:
        """A row's vector in the clear (opening a sealed one); None when it has none or it
        cannot be opened."""
        import numpy as np

        if row.embedding is not None or row.sealed_embedding is None:
            return row.embedding
        try:
            data = self.keyring.open_vector(
                row.id, row.created_at, row.key_id, row.sealed_embedding
            )
        except Unreadable:
            return None
        return np.frombuffer(data, dtype="<f4").astype(np.float32)

    def _open_vector(self, row: Row) -> None:
        """Put a row's sealed vector in the clear (or drop it, to be embedded again)."""
        vector = self.vector_of(row)
        if vector is None and row.sealed_embedding is not None:
            row.embedding_model = None
        row.embedding, row.sealed_embedding = vector, None

    def salvage(self) -> Recovery:
        """Keep every readable entry in a fresh file and set the damaged one aside (SQLite)."""
        from singularity.journal.sqlite_store import SqliteStore

        if not isinstance(self.store, SqliteStore):
            raise JournalError("only an SQLite journal file can be salvaged")
        with guarded("salvage the journal"):
            self.store, done = recovery.salvage(self.store, self.keyring, self.now())
        self.recoveries.append(done)
        return done

    def heal(self) -> Recovery | None:
        """Salvage the SQLite file when its quick check finds damage; None when it is sound."""
        path = getattr(self.store, "path", None)
        if not isinstance(path, str) or not recovery.damage(path, quick=True):
            return None
        return self.salvage()

    def _healing(self, action: Callable[[], T]) -> T:
        """Run a being's operation; on a damaged file, salvage once and run it again."""
        try:
            return action()
        except Damaged:
            if self.heal() is None:
                raise
            return action()

    def entry(self, entry_id: str) -> Row | None:
        """An unexpired entry's row (no text), or None."""
        with guarded("read the journal"):
            rows = self.store.rows(Filter(since=self.window_start()), ids=[entry_id])
        return rows[0] if rows else None

    def mark_promoted(self, row: Row, ref: str) -> None:
        """Record that a summary of the entry went public under `ref`."""
        row.promoted = True
        row.promoted_at = self.now()
        row.promoted_ref = ref
        with guarded("update the journal"):
            self.store.update(row)

    def expired(self) -> int:
        """How many rows a purge now would delete."""
        keep = self.config.keep_promoted
        with guarded("read the journal"):
            rows = self.store.rows(Filter(before=self.window_start()))
        return sum(1 for row in rows if not (keep and row.promoted))

    def purge(self) -> int:
        """Delete entries older than the window, then retire keys that no row needs."""
        with guarded("purge the journal"):
            count = self.store.purge(self.window_start(), self.config.keep_promoted)
            current = self.keyring.keys[self.keyring.current]
            if self.now() - current.created_at > self.retention:
                self.keyring.add_key(self.now())
            self.keyring.drop_keys(self.store.key_ids())
        return count

    def verify(self) -> Verified:
        """Authenticate every row; on a damaged SQLite file, every row still readable, and
        name the damage and the rows it made unreadable."""
        from singularity.journal.sqlite_store import row_of

        path = getattr(self.store, "path", None)
        damage = recovery.damage(path) if isinstance(path, str) else []
        lost: list[str] = []
        unreachable = False
        if damage and isinstance(path, str):
            records, lost, unreachable = recovery.readable_rows(path)
            rows = [row_of(record) for record in records]
        else:
            with guarded("read the journal"):
                rows = self.store.rows()
        failed = []
        for row in rows:
            try:
                self.keyring.open(row)
            except Unreadable:
                failed.append(row.id)
        return Verified(len(rows), failed, damage, lost, unreachable)

    def rotate_key(self) -> tuple[str, int, list[str]]:
        """Re-seal every readable row under a new key; drop keys no row needs any more."""
        new = self.keyring.add_key(self.now())
        moved, failed = 0, []
        with guarded("rotate the journal key"):
            for row in self.store.rows():
                if row.key_id == new:
                    continue
                try:
                    text = self.keyring.open(row)
                except Unreadable:
                    failed.append(row.id)
                    continue
                self._open_vector(row)  # to be sealed again under the new key
                row.nonce, row.ciphertext, row.key_id = self.keyring.seal(
                    row.id, row.created_at, text
                )
                self.store.update(row)
                moved += 1
            self.keyring.drop_keys(self.store.key_ids())
        return new, moved, failed

    def pending_embeddings(self) -> int:
        """How many entries (redacted ones aside) lack a vector of the current model."""
        with guarded("read the journal"):
            return self.store.count(Filter(lacking_model=self.embedder.name))

    def embed_pending(self, limit: int | None = None) -> tuple[int, list[str]]:
        """Embed rows that lack a vector of the current model: (embedded, unreadable ids)."""
        from singularity.journal.embedders import as_vector

        with guarded("embed journal entries"):
            pending = self.store.rows(Filter(lacking_model=self.embedder.name))
        if limit is not None:
            pending = pending[:limit]
        done, failed = 0, []
        for start in range(0, len(pending), EMBED_BATCH):
            batch, texts = [], []
            for row in pending[start : start + EMBED_BATCH]:
                try:
                    texts.append(self.keyring.open(row))
                    batch.append(row)
                except Unreadable:
                    failed.append(row.id)
            if not batch:
                continue
            vectors = self.embedder.embed(texts)
            now = self.now()
            with guarded("embed journal entries"):
                for row, vector in zip(batch, vectors, strict=True):
                    row.embedding = as_vector(vector)
                    row.embedding_model = self.embedder.name
                    row.embedded_at = now
                    self.store.update(row)
            done += len(batch)
        return done, failed

    def latest_mood(self, within: timedelta) -> str | None:
        """The mood of the newest entry written within `within`, if it has one."""
        with guarded("read the journal"):
            rows = self.store.rows(Filter(since=self.now() - within))
        moods = [row.mood for row in rows if row.mood]
        return moods[-1] if moods else None

    def stats(self) -> dict[str, Any]:
        """Counts and ages only; never any text."""
        with guarded("read the journal"):
            rows = self.store.rows()
        now = self.now()
        oldest = min((row.created_at for row in rows), default=None)
        return {
            "backend": self.store.backend,
            "location": describe(self.config.url, self.config.state_dir),
            "entries": len(rows),
            "by_day": dict(
                sorted(Counter(render_timestamp(r.created_at)[:10] for r in rows).items())
            ),
            "by_mood": dict(sorted(Counter(r.mood or "(none)" for r in rows).items())),
            "promoted": sum(r.promoted for r in rows),
            "redacted": sum(r.redacted for r in rows),
            "oldest_age_hours": None
            if oldest is None
            else round((now - oldest).total_seconds() / 3600, 2),
            "expired": sum(1 for r in rows if r.created_at < now - self.retention),
            "embedder": self.embedder.name,
            "by_embedding_model": dict(
                sorted(Counter(r.embedding_model or "(none)" for r in rows).items())
            ),
            "keys": len(self.keyring.keys),
            "current_key": self.keyring.current,
            "retention_days": self.config.retention_days,
        }

    def destroy(self) -> None:
        """Delete every row, then the key: whatever copy of the ciphertext survives is noise."""
        with guarded("destroy the journal"):
            self.store.destroy()
        self.keyring.destroy()

    def close(self) -> None:
        """Close the store."""
        with guarded("close the journal"):
            self.store.close()
