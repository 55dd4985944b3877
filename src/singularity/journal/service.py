"""The journal as the being and the CLI use it: write, recall, promote, purge, maintain.

Plaintext exists only in this process's memory, for the length of one call: it is
sealed before it reaches the store, and recall decrypts only the top `k` rows.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from singularity.journal import redaction
from singularity.journal.keyring import ForeignKeyFile, Keyring, Unreadable, key_path, load_keyring
from singularity.journal.records import (
    MAX_ENTRIES_PER_DAY,
    Filter,
    JournalError,
    Row,
)
from singularity.journal.store import JournalStore, describe, open_store
from singularity.storage import fsio
from singularity.timestamps import Clock, render_timestamp, system_clock

if TYPE_CHECKING:
    from singularity.journal.embedders import Embedder

log = logging.getLogger(__name__)
EMBED_BATCH = 64


@dataclass(frozen=True)
class JournalConfig:
    """Where the journal lives and how it behaves."""

    state_dir: str
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


class CapReached(JournalError):
    """The daily entry cap is used up."""


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
            found.append(Recalled(ident, held.created_at, held.mood, score, text))
        return found, failed

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

    def verify(self) -> tuple[int, list[str]]:
        """Authenticate every row: (rows checked, ids that failed)."""
        with guarded("read the journal"):
            rows = self.store.rows()
        failed = []
        for row in rows:
            try:
                self.keyring.open(row)
            except Unreadable:
                failed.append(row.id)
        return len(rows), failed

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
                row.nonce, row.ciphertext, row.key_id = self.keyring.seal(
                    row.id, row.created_at, text
                )
                self.store.update(row)
                moved += 1
            self.keyring.drop_keys(self.store.key_ids())
        return new, moved, failed

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


def open_journal(
    config: JournalConfig,
    clock: Clock = system_clock,
    *,
    create: bool = True,
    embedder: Embedder | None = None,
) -> Journal | None:
    """Open (or, when allowed, create) a being's journal; None when there is none yet."""
    now = clock().astimezone(UTC)
    path = key_path(config.state_dir, config.key_file)
    try:
        keyring = load_keyring(path, config.state_dir, now, create=create)
    except ForeignKeyFile:
        log.warning("the journal key file serves another being; using this being's own key file")
        keyring = load_keyring(
            key_path(config.state_dir, None), config.state_dir, now, create=create
        )
    if keyring is None:
        return None
    from singularity.journal.embedders import make_embedder

    chosen = embedder or make_embedder(config.embedder)
    store = open_store(config.url, config.state_dir, keyring.journal_id)
    return Journal(config, keyring, store, chosen, clock)
