"""The journal's rows, limits and errors, shared by every backend."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from singularity.errors import StateError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]
else:
    Vector = object  # NumPy is imported only once a journal is opened (boot stays light).

MAX_ENTRY_BYTES = 4096
MAX_ENTRIES_PER_DAY = 200
MAX_QUERY_BYTES = 1024
MAX_RECALL_K = 20
DEFAULT_RECALL_K = 5
MAX_SUMMARY_BYTES = 2048
MAX_MOOD_BYTES = 32
MAX_THREAD_BYTES = 64
MOOD = re.compile(rf"[a-z][a-z0-9-]{{0,{MAX_MOOD_BYTES - 1}}}")
"""A mood: a lowercase word of at most `MAX_MOOD_BYTES` (letters, digits, hyphens)."""
THREAD = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_THREAD_BYTES - 1}}}")
"""A thread id: at most `MAX_THREAD_BYTES` of ASCII letters, digits, `_`, `.` and `-`."""
DEFAULT_RETENTION_DAYS = 30
EMBEDDER_CHOICES = ("auto", "minilm", "hashing")


class JournalError(StateError):
    """The journal cannot do what was asked (unreadable key, unreachable database, …)."""

    prefix = "journal"


@dataclass
class Row:
    """One stored entry: metadata in the clear, the text only as ciphertext."""

    id: str
    created_at: datetime
    ciphertext: bytes
    nonce: bytes
    key_id: str
    mood: str | None = None
    embedding: Vector | None = field(default=None, repr=False)
    sealed_embedding: bytes | None = field(default=None, repr=False)
    """The vector as the SQLite file holds it, encrypted (when it was not opened)."""
    embedding_model: str | None = None
    embedded_at: datetime | None = None
    thread_id: str | None = None
    seq: int | None = None
    redacted: bool = False
    promoted: bool = False
    promoted_at: datetime | None = None
    promoted_ref: str | None = None


@dataclass(frozen=True)
class Filter:
    """Which rows a query covers; every condition that is set must hold."""

    since: datetime | None = None
    before: datetime | None = None
    mood: str | None = None
    thread_id: str | None = None
    key_id: str | None = None
    lacking_model: str | None = None
    """Only rows that have no vector of this model (and are not redacted)."""


EVERYTHING = Filter()


def to_micros(moment: datetime) -> int:
    """Microseconds since the epoch, the exact form both backends store."""
    delta = moment.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    """The UTC moment of a microsecond count."""
    seconds, rest = divmod(micros, 1_000_000)
    return datetime.fromtimestamp(seconds, UTC).replace(microsecond=rest)
