"""The one way the runtime reaches a sanctum, whichever backend keeps it.

A sanctum is a tree of folders and small files named by their path from its root (`parts`,
as `singularity.tools.confinement.parse_path` gives them). Two backends keep it:

- a folder of human-readable files (`singularity.sanctum.store.SanctumStore`), the sanctum
  of a being in a state directory;
- versioned rows in PostgreSQL (`singularity.store.postgres.sanctum_rows.PostgresSanctum`), the
  sanctum of a being in a PostgreSQL state store: every write a new version, written under
  the being's lease.

The tools, the wake and its map, the session notes, Pulse and the operator's edits see only
this protocol. Every failure is a `SanctumRefusal` with a tool error code.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Protocol

from singularity.sanctum.descriptors import MAX_READ_BYTES
from singularity.sanctum.scan import FolderScan, MapCache
from singularity.sanctum.search import Found
from singularity.sanctum.store import Entry


class Sanctum(Protocol):
    """An open sanctum: reads, writes and listings of paths beneath its root."""

    def close(self) -> None:
        """Release what the sanctum holds open."""
        ...

    def remove_stale_temps(self) -> int:
        """Remove leftovers of writes a crash cut short (at boot); how many."""
        ...

    def make_dir(self, parts: Sequence[str]) -> None:
        """Create the folder `parts` and its parents if missing."""
        ...

    def read_bytes(self, parts: Sequence[str], limit: int = MAX_READ_BYTES) -> bytes:
        """Every byte of a file of at most `limit` bytes."""
        ...

    def read_head(self, parts: Sequence[str], limit: int) -> tuple[bytes, int]:
        """The first `limit` bytes of a file of any size, and its size."""
        ...

    def read_text(self, parts: Sequence[str], limit: int = MAX_READ_BYTES) -> str:
        """A file as UTF-8 text."""
        ...

    def read_optional(self, parts: Sequence[str], limit: int = MAX_READ_BYTES) -> str | None:
        """A file as text, or None when it does not exist."""
        ...

    def exists(self, parts: Sequence[str]) -> bool:
        """Whether `parts` names an entry of any kind."""
        ...

    def is_file(self, parts: Sequence[str]) -> bool:
        """Whether `parts` names a file."""
        ...

    def stamp(self, parts: Sequence[str]) -> Hashable | None:
        """A value that changes whenever the entry does (None when it is missing)."""
        ...

    def replace(self, parts: Sequence[str], data: bytes) -> None:
        """Durably create or replace a file (its missing folders made)."""
        ...

    def append(self, parts: Sequence[str], data: bytes, *, create: bool = False) -> None:
        """Add `data` to the end of an existing file (a refusal when it is missing; with
        `create`, a missing file is made holding `data`): the cheap write of the session
        notes. A running being's append rides in its next durable step: in its rows, in
        the step's transaction (a session note and the `session_note_auto` journaled after
        it are committed together); in a state directory, in the step's redo record, one
        fdatasync for both, and written to the file once that is durable
        (`singularity.sanctum.riding`). Elsewhere a folder's append is durable when it
        returns (one write, one fdatasync)."""
        ...

    def create(self, parts: Sequence[str], data: bytes) -> bool:
        """Durably create a file that must not exist yet; False (nothing written) if it does."""
        ...

    def remove(self, parts: Sequence[str]) -> None:
        """Durably remove one file."""
        ...

    def entries(self, parts: Sequence[str]) -> list[Entry]:
        """The entries of a folder, sizes and change times of files included."""
        ...

    def files_under(self, parts: Sequence[str]) -> list[Found]:
        """Every file in the folder and below it (`memory/.tended` aside); none if missing."""
        ...

    def contents(self, ordered: Sequence[Found]) -> Iterator[tuple[Found, bytes]]:
        """The bytes of each file in turn (a file over 256 KiB, or gone meanwhile, skipped)."""
        ...

    def scan_tree(self, top: str, cache: MapCache | None) -> list[FolderScan]:
        """Summaries of the folder `top` and every folder below it, depth first."""
        ...
