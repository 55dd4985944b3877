"""The sanctum of a being in PostgreSQL, as a `Sanctum` backend: versioned rows, fenced.

Every write adds a new version of the entries it changes to `singularity.sanctum_files`
(a file's bytes, a folder, a removal, or the bytes an append added) in one transaction
that first holds the being's lease (`singularity.hold_lease`): a runtime whose lease
another runtime took over cannot write, and its write is refused (`sanctum_io`). Each
version records the lease epoch that wrote it. Reads give the latest version of every
path, from an index loaded at open and kept by this runtime's own writes: while it holds
the lease, nobody else writes.

Folders follow the folder backend's rules: a file's missing folders are made with it (as
rows of their own), removing a file leaves its folder, and a path through a file is
refused as the folder backend refuses it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

import psycopg

from singularity.errors import StateError
from singularity.sanctum.descriptors import MAX_READ_BYTES
from singularity.sanctum.entries import SanctumEntry, read_folder
from singularity.sanctum.names import (
    BOUNDARY,
    IO,
    MEMORY,
    NOT_FOUND,
    TENDED,
    SanctumRefusal,
    unless_missing,
)
from singularity.sanctum.names import name_date as date_of
from singularity.sanctum.reads import TextReads
from singularity.sanctum.scan import RAW_SCAN_CHARS, FolderScan, MapCache, summary
from singularity.sanctum.search import Found
from singularity.sanctum.store import BOUNDARY_MESSAGE, NOT_BOUNDED_MESSAGE, Entry
from singularity.state_place import shown_url
from singularity.store.postgres.census import holds_being
from singularity.store.postgres.lease import Lease
from singularity.store.postgres.migrations import LEASE_LOST
from singularity.store.postgres.sanctum import LATEST_VERSIONS
from singularity.store.postgres.store import (
    HOLD,
    Batch,
    Connection,
    PostgresStore,
    closed_on_failure,
    connect,
)

log = logging.getLogger(__name__)
Parts = tuple[str, ...]
T = TypeVar("T")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NO_SUCH_FILE = "no such file in the sanctum"
FENCED = (
    "the being's lease was taken over by another runtime: this runtime writes nothing more "
    "to its sanctum"
)
READ_ONLY = "the sanctum was opened to read (writing needs the being's lease)"
ADD = (
    "INSERT INTO singularity.sanctum_files (agent_id, path, version, content, written_at, "
    "epoch, appended) VALUES {values}"
)


@dataclass(frozen=True)
class Version:
    """The latest version of a file: its number, its bytes and when it was written."""

    number: int
    content: bytes
    written_ns: int


@dataclass(frozen=True)
class Change:
    """One new version: a folder (content b""), a file's bytes, or a file's removal (None).
    With `appended`, the file's bytes are its content so far followed by `appended`, and
    the version's row holds `appended` alone."""

    parts: Parts
    kind: Literal["file", "dir"]
    content: bytes | None
    appended: bytes | None = None

    @property
    def path(self) -> str:
        """The row's path (a folder's ends in `/`)."""
        return _path(self.parts, self.kind)


@dataclass(frozen=True)
class Added:
    """New versions of some entries: their numbers and the statement that adds them."""

    lease: Lease
    numbers: list[int]
    sql: str
    parameters: list[Any]
    written_at: datetime


def _ns(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1) * 1000


class PostgresSanctum(TextReads):
    """A being's sanctum in a PostgreSQL state store (see the module docstring)."""

    def __init__(
        self,
        db: Connection,
        agent_id: str,
        label: str,
        lease: Lease | None,
        steps: PostgresStore | None = None,
    ) -> None:
        """Over an open connection; `lease` None opens it read only. With `steps` (the
        store holding the being) an append rides with the being's next step."""
        self.db = db
        self.steps = steps
        self.agent_id = agent_id
        self.label = label
        self.lease = lease
        self.fenced = False
        self._lock = threading.RLock()
        self._versions: dict[str, int] = {}
        """The latest version number of every path ever written, removals included."""
        self._files: dict[Parts, Version] = {}
        self._folders: dict[Parts, dict[str, Literal["file", "dir"]]] = {(): {}}
        self._load()

    @classmethod
    def held(cls, store: PostgresStore) -> PostgresSanctum:
        """The sanctum of the being `store` holds, written under its lease (own connection)."""
        db = connect(store.url, store.lease.seconds)
        try:
            return cls(db, store.agent_id, store.label, store.lease, store)
        except BaseException:
            db.close()
            raise

    @classmethod
    def peek(cls, url: str, agent_id: str) -> PostgresSanctum:
        """The sanctum of the being `agent_id` in the store at `url`, to read, without its
        lease (StateError when the store holds no such being)."""
        label = f"being {agent_id} in {shown_url(url)}"
        db = connect(url)
        with closed_on_failure(db, f"cannot read the sanctum of {label}"):
            if not holds_being(db, agent_id):
                raise StateError(f"no {label}")
            return cls(db, agent_id, label, None)

    def _load(self) -> None:
        try:
            found = self.db.execute(LATEST_VERSIONS, (self.agent_id,)).fetchall()
        except psycopg.Error as error:
            raise StateError(f"cannot read the sanctum of {self.label}: {error}") from None
        for path, number, content, written_at in found:
            self._versions[path] = int(number)
            if content is None:
                continue
            parts = SanctumEntry(path).parts()
            if path.endswith("/"):
                self._index_folder(parts)
            else:
                self._index_file(parts, Version(int(number), bytes(content), _ns(written_at)))

    @property
    def is_empty(self) -> bool:
        """Whether the sanctum holds nothing (no file, no folder)."""
        return not self._folders[()]

    def close(self) -> None:
        """Close the sanctum's connection."""
        with contextlib.suppress(psycopg.Error):
            self.db.close()

    def remove_stale_temps(self) -> int:
        """Nothing to remove: a write that a crash cut short left no row."""
        return 0

    # The index.

    def _index_folder(self, parts: Parts) -> None:
        for depth in range(1, len(parts) + 1):
            self._folders[parts[: depth - 1]][parts[depth - 1]] = "dir"
            self._folders.setdefault(parts[:depth], {})

    def _index_file(self, parts: Parts, version: Version) -> None:
        self._index_folder(parts[:-1])
        self._folders[parts[:-1]][parts[-1]] = "file"
        self._files[parts] = version

    def _kind(self, parts: Parts) -> Literal["file", "dir"] | None:
        """What `parts` names; a path through a file, or no path, is refused."""
        _check(parts)
        self._folder(parts[:-1])
        return self._folders[parts[:-1]].get(parts[-1])

    def _folder(self, parts: Parts) -> dict[str, Literal["file", "dir"]]:
        """The names in the folder `parts`, refused as the folder backend refuses it."""
        for depth in range(1, len(parts) + 1):
            kind = self._folders[parts[: depth - 1]].get(parts[depth - 1])
            if kind is None:
                raise SanctumRefusal(NOT_FOUND, NO_SUCH_FILE)
            if kind == "file":
                raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
        return self._folders[parts]

    def _file(self, parts: Parts) -> Version:
        kind = self._kind(parts)
        if kind is None:
            raise SanctumRefusal(NOT_FOUND, NO_SUCH_FILE)
        if kind == "dir":
            raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
        return self._files[parts]

    def _locked(self, run: Callable[[], T]) -> T:
        with self._lock:
            return run()

    # Reads.

    def read_bytes(self, parts: Sequence[str], limit: int = MAX_READ_BYTES) -> bytes:
        """Every byte of a file of at most `limit` bytes."""
        content = self._locked(lambda: self._file(tuple(parts))).content
        if len(content) > limit:
            raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
        return content

    def read_head(self, parts: Sequence[str], limit: int) -> tuple[bytes, int]:
        """The first `limit` bytes of a file, and its size."""
        content = self._locked(lambda: self._file(tuple(parts))).content
        return content[:limit], len(content)

    def _kind_or_none(self, parts: Sequence[str]) -> Literal["file", "dir"] | None:
        return unless_missing(lambda: self._locked(lambda: self._kind(tuple(parts))))

    def exists(self, parts: Sequence[str]) -> bool:
        """Whether `parts` names a file or a folder."""
        return not parts or self._kind_or_none(parts) is not None

    def is_file(self, parts: Sequence[str]) -> bool:
        """Whether `parts` names a file."""
        return self._kind_or_none(parts) == "file"

    def stamp(self, parts: Sequence[str]) -> Hashable | None:
        """The entry's latest version number (None when it is missing)."""
        kind = self._kind_or_none(parts)
        if kind is None:
            return None
        return (kind, self._versions.get(_path(tuple(parts), kind), 0))

    def entries(self, parts: Sequence[str]) -> list[Entry]:
        """The entries of a folder, by name."""

        def listed() -> list[Entry]:
            folder = tuple(parts)
            found = []
            for name, kind in sorted(self._folder(folder).items()):
                if kind == "dir":
                    found.append(Entry(name, "dir"))
                else:
                    version = self._files[(*folder, name)]
                    found.append(Entry(name, "file", len(version.content), version.written_ns))
            return found

        return self._locked(listed)

    def _walk(self, top: Parts, visit: Callable[[Parts, dict[str, str]], None]) -> None:
        """`visit(folder, names)` on `top` and every folder below it, depth first."""
        names = unless_missing(lambda: self._folder(top))
        if names is None:
            return
        visit(top, dict(names))
        for name, kind in sorted(names.items()):
            if kind == "dir":
                self._walk((*top, name), visit)

    def files_under(self, parts: Sequence[str]) -> list[Found]:
        """Every file in the folder and below it (`memory/.tended` aside)."""
        found: list[Found] = []

        def visit(folder: Parts, names: dict[str, str]) -> None:
            shown = _shown(folder)
            for name, kind in sorted(names.items()):
                if kind == "file" and not (folder == (MEMORY,) and name == TENDED):
                    written = self._files[(*folder, name)].written_ns
                    found.append(Found(shown, name, date_of(name), written))

        self._locked(lambda: self._walk(tuple(parts), visit))
        return found

    def contents(self, ordered: Sequence[Found]) -> Iterator[tuple[Found, bytes]]:
        """Each file's bytes, as the folder backend reads them (at most 256 KiB)."""
        for found in ordered:
            parts = tuple(part for part in found.path.split("/") if part)
            with self._lock:
                version = self._files.get(parts)
            if version is not None and len(version.content) <= MAX_READ_BYTES:
                yield found, version.content

    def scan_tree(self, top: str, cache: MapCache | None) -> list[FolderScan]:
        """Summaries of `top` and every folder below it, depth first (no cache needed: the
        index is in memory)."""
        scans: list[FolderScan] = []

        def visit(folder: Parts, names: dict[str, str]) -> None:
            files = sorted(name for name, kind in names.items() if kind == "file")
            dirs = sorted(name for name, kind in names.items() if kind == "dir")
            scans.append(
                summary(
                    _shown(folder),
                    files,
                    dirs,
                    lambda name: self._files[(*folder, name)].written_ns,
                    lambda wanted: {
                        name: self._files[(*folder, name)]
                        .content[: RAW_SCAN_CHARS * 4]
                        .decode("utf-8", "replace")
                        for name in wanted
                    },
                    raw=top == "raw",
                )
            )

        self._locked(lambda: self._walk((top,), visit))
        return scans

    # Writes.

    def adopt(self, entries: Sequence[SanctumEntry]) -> None:
        """Write every entry (parents first) as a new version, in one transaction."""
        with self._lock:
            self._write(
                [
                    Change(entry.parts(), "dir", b"")
                    if entry.content is None
                    else Change(entry.parts(), "file", entry.content)
                    for entry in entries
                ]
            )

    def make_dir(self, parts: Sequence[str]) -> None:
        """Create the folder `parts` and its parents if missing (a row each)."""
        with self._lock:
            folder = tuple(parts)
            _check(folder)
            self._write(self._missing_folders(folder))

    def replace(self, parts: Sequence[str], data: bytes) -> None:
        """Write a new version of a file (its missing folders made)."""
        with self._lock:
            path = tuple(parts)
            if self._kind_with_folders(path) == "dir":
                raise SanctumRefusal(IO, "destination is not a regular file")
            self._write([*self._missing_folders(path[:-1]), Change(path, "file", bytes(data))])

    def append(self, parts: Sequence[str], data: bytes, *, create: bool = False) -> None:
        """Write a new version of an existing file: its content with `data` at the end
        (with `create`, a missing file's first version, its missing folders made).

        In the sanctum of a running being (`steps`) the version is written in the being's
        next step, in its transaction: the session note and the `session_note_auto` that
        follows it are durable together, in one commit, or neither is.
        """
        with self._lock:
            path = tuple(parts)
            if create and self._kind_with_folders(path) is None:
                changes = [*self._missing_folders(path[:-1]), Change(path, "file", bytes(data))]
            else:
                content, appended = self._file(path).content, bytes(data)
                changes = [Change(path, "file", content + appended, appended)]
            if self.steps is None:
                self._write(changes)
                return
            added = self._versions_of(changes)
            self.steps.ride(lambda batch: batch.execute(added.sql, added.parameters))
            self._index(changes, added)

    def create(self, parts: Sequence[str], data: bytes) -> bool:
        """Write version 1 of a file that does not exist; False (nothing written) if it does."""
        with self._lock:
            path = tuple(parts)
            if self._kind_with_folders(path) is not None:
                return False
            self._write([*self._missing_folders(path[:-1]), Change(path, "file", bytes(data))])
            return True

    def remove(self, parts: Sequence[str]) -> None:
        """Write a removal of one file."""
        with self._lock:
            path = tuple(parts)
            self._file(path)
            self._write([Change(path, "file", None)])

    def _kind_with_folders(self, parts: Parts) -> Literal["file", "dir"] | None:
        """What `parts` names, its folders missing counting as empty ones (they are made)."""
        _check(parts)
        for depth in range(1, len(parts)):
            kind = self._folders[parts[: depth - 1]].get(parts[depth - 1])
            if kind is None:
                return None
            if kind == "file":
                raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
        return self._folders[parts[:-1]].get(parts[-1])

    def _missing_folders(self, parts: Parts) -> list[Change]:
        missing: list[Change] = []
        for depth in range(1, len(parts) + 1):
            kind = self._folders.get(parts[: depth - 1], {}).get(parts[depth - 1])
            if kind == "file":
                raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
            if kind is None:
                missing.append(Change(parts[:depth], "dir", b""))
        return missing

    def _write(self, changes: list[Change]) -> None:
        """Add one version of each change in one transaction holding the lease, then index
        them; nothing is indexed when the transaction is refused."""
        if not changes:
            return
        added = self._versions_of(changes)
        try:
            batch = Batch(self.db)
            batch.execute(HOLD, added.lease.hold_arguments())
            batch.execute(added.sql, added.parameters)
            batch.run()
        except psycopg.Error as error:
            if getattr(error, "sqlstate", None) == LEASE_LOST:
                self.fenced = True
                raise SanctumRefusal(IO, FENCED) from None
            raise SanctumRefusal(IO, f"cannot write the sanctum of {self.label}: {error}") from None
        self._index(changes, added)

    def _versions_of(self, changes: list[Change]) -> Added:
        """The next version of each change and the statement adding them; refused without
        the lease."""
        if self.lease is None:
            raise SanctumRefusal(IO, READ_ONLY)
        if self.fenced:
            raise SanctumRefusal(IO, FENCED)
        written_at = datetime.now(UTC)
        numbers = [self._versions.get(change.path, 0) + 1 for change in changes]
        values = ", ".join(["(%s, %s, %s, %s::bytea, %s, %s, %s)"] * len(changes))
        parameters: list[Any] = []
        for change, number in zip(changes, numbers, strict=True):
            parameters += [
                self.agent_id,
                change.path,
                number,
                change.content if change.appended is None else change.appended,
                written_at,
                self.lease.epoch,
                change.appended is not None,
            ]
        return Added(self.lease, numbers, ADD.format(values=values), parameters, written_at)

    def _index(self, changes: list[Change], added: Added) -> None:
        """Take written versions into the index the reads use."""
        written_ns = _ns(added.written_at)
        for change, number in zip(changes, added.numbers, strict=True):
            self._versions[change.path] = number
            if change.kind == "dir":
                self._index_folder(change.parts)
            elif change.content is None:
                del self._folders[change.parts[:-1]][change.parts[-1]]
                del self._files[change.parts]
            else:
                self._index_file(change.parts, Version(number, change.content, written_ns))


def _check(parts: Parts) -> None:
    """Refuse what is not a path of normal names beneath the root."""
    if not parts or any(
        not part or part in (".", "..") or "/" in part or "\0" in part for part in parts
    ):
        raise SanctumRefusal(BOUNDARY, BOUNDARY_MESSAGE)


def _path(parts: Parts, kind: str) -> str:
    """The row's path: a folder's ends in `/`."""
    return "/".join(parts) + ("/" if kind == "dir" else "")


def _shown(folder: Parts) -> str:
    return "/".join(folder) + "/" if folder else ""


def held_sanctum(store: PostgresStore, folder: str) -> PostgresSanctum:
    """The sanctum of the being `store` holds, under its lease. A being that kept its
    sanctum in the folder `folder` of its state directory before it lived in rows has it
    copied in (as the first versions, in one transaction) when the rows hold none."""
    sanctum = PostgresSanctum.held(store)
    try:
        if sanctum.is_empty:
            found = read_folder(folder)
            if found:
                sanctum.adopt(found)
                log.info("copied the sanctum folder %s into %s", folder, sanctum.label)
    except BaseException:
        sanctum.close()
        raise
    return sanctum
