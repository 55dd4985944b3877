"""When the SQLite journal cannot be read whole: find the damage, set files aside, salvage.

Nothing here deletes a journal file. A file that can no longer serve (its key is gone, it
belongs to another journal, or its pages are damaged) is renamed beside itself as
`journal.sqlite3.<reason>-<UTC time>`, with its `-wal` and `-shm`, so the operator can
still look at it. Salvage copies every row that can still be read into a fresh file,
`journal.sqlite3.salvaged`, sets the damaged one aside, then moves the fresh one into
place; a crash between the two moves is finished at the next open.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from singularity.journal.keyring import Keyring, Unreadable
from singularity.storage import fsio

if TYPE_CHECKING:
    from singularity.journal.sqlite_store import SqliteStore

SIDECARS = ("", "-wal", "-shm")
SALVAGED_SUFFIX = ".salvaged"
POINT = "journal-aside"
MAX_DAMAGE_LINES = 20
# How far past the highest rowid seen salvage probes for rows a damaged page hid.
PROBE_BEYOND = 256


@dataclass(frozen=True)
class Recovery:
    """What the runtime did to a journal it could not read whole (metadata only)."""

    reason: str
    """`key_lost`, `foreign` (another journal's file) or `damaged`."""
    set_aside: str | None
    """The file name the old database now has, if there was one."""
    kept: int = 0
    lost: list[str] = field(default_factory=list)
    """Ids of entries known to be lost (their rows could not be read)."""
    unreachable: bool = False
    """Whether some rows may be lost whose ids could not be read either."""


def exists(path: str) -> bool:
    """Whether a database file (or only its WAL) is there."""
    return any(os.path.lexists(path + suffix) for suffix in SIDECARS)


def set_aside(path: str, reason: str, now: datetime) -> str | None:
    """Rename the database and its sidecars to `<name>.<reason>-<time>`; None if none exists."""
    directory, name = os.path.split(os.path.abspath(path))
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    new = f"{name}.{reason.replace('_', '-')}-{stamp}"
    dir_fd = fsio.open_dir(directory)
    moved = False
    try:
        for suffix in SIDECARS:
            try:
                fsio.move_file(dir_fd, name + suffix, new + suffix, point=POINT)
            except FileNotFoundError:
                continue
            moved = True
    finally:
        os.close(dir_fd)
    return new if moved else None


def finish_salvage(path: str) -> None:
    """Move a salvaged file into place when a crash came between salvage's two moves."""
    fresh = path + SALVAGED_SUFFIX
    if os.path.lexists(fresh) and not exists(path):
        directory, name = os.path.split(os.path.abspath(path))
        dir_fd = fsio.open_dir(directory)
        try:
            fsio.move_file(dir_fd, name + SALVAGED_SUFFIX, name, point=POINT)
        finally:
            os.close(dir_fd)


def damage(path: str, *, quick: bool = False) -> list[str]:
    """What SQLite's integrity check (or its quick form) finds wrong; empty when sound."""
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0)
    except sqlite3.Error as error:
        return [str(error)]
    try:
        check = "quick_check" if quick else "integrity_check"
        found = [str(line) for (line,) in connection.execute(f"PRAGMA {check}")]
    except sqlite3.DatabaseError as error:
        return [str(error)]
    finally:
        connection.close()
    return [] if found == ["ok"] else found[:MAX_DAMAGE_LINES]


def _collect(connection: sqlite3.Connection, query: str, into: dict[int, str | None]) -> bool:
    """Add the (rowid, id) pairs a query yields until it fails; False when it failed."""
    try:
        for rowid, ident in connection.execute(query):
            if rowid is not None:
                into.setdefault(int(rowid), None if ident is None else str(ident))
                if ident is not None:
                    into[int(rowid)] = str(ident)
    except sqlite3.DatabaseError:
        return False
    return True


def salvage(store: SqliteStore, keyring: Keyring, now: datetime) -> tuple[SqliteStore, Recovery]:
    """Copy every readable, authentic row into a fresh file and put it in the damaged one's
    place (which is set aside); returns the store on the fresh file and what was done."""
    from singularity.journal.sqlite_store import SqliteStore, row_of

    path = store.path
    records, lost, unreachable = readable_rows(path)
    kept = []
    for record in records:
        row = row_of(record)
        try:
            keyring.open(row)
        except Unreadable:
            lost.append(row.id)
            continue
        kept.append(row)
    store.close()
    fresh_path = path + SALVAGED_SUFFIX
    set_aside(fresh_path, "stale", now)  # a salvage that crashed before its first move
    fresh = SqliteStore.open(fresh_path, keyring.journal_id, keyring)
    try:
        for row in kept:
            fresh.insert(row)
        fresh.db.execute("PRAGMA journal_mode=DELETE")  # one self-contained file to move
    finally:
        fresh.close()
    moved = set_aside(path, "damaged", now)
    finish_salvage(path)
    done = Recovery("damaged", moved, len(kept), sorted(set(lost)), unreachable)
    return SqliteStore.open(path, keyring.journal_id, keyring), done


def readable_rows(path: str) -> tuple[list[tuple[object, ...]], list[str], bool]:
    """Every row of `entries` that can still be read, the ids of rows that cannot, and
    whether some rows may be unreachable altogether (their ids unreadable too)."""
    from singularity.journal.sqlite_store import SELECTED

    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0)
    except sqlite3.Error:
        return [], [], True
    try:
        seen: dict[int, str | None] = {}
        complete = True
        for query in _ROWID_QUERIES:
            complete &= _collect(connection, query, seen)
        highest = max(seen, default=0)
        rows: list[tuple[object, ...]] = []
        lost: list[str] = []
        for rowid in _candidates(seen, highest):
            try:
                found = connection.execute(
                    f"SELECT {SELECTED} FROM entries WHERE rowid = ?", (rowid,)
                ).fetchone()
            except sqlite3.DatabaseError:
                ident = seen.get(rowid)
                if ident is not None:
                    lost.append(ident)
                elif rowid in seen:
                    complete = False
                continue
            if found is not None:
                rows.append(tuple(found))
        return rows, sorted(set(lost)), not complete
    finally:
        connection.close()


def _candidates(seen: dict[int, str | None], highest: int) -> Iterable[int]:
    """Rowids to try: every one seen, and every one up to a little past the highest."""
    return sorted(set(seen) | set(range(1, highest + PROBE_BEYOND + 1)))


# Each path to the rows: the table itself both ways, and both indexes both ways, so one
# damaged page hides as few rows as possible.
_ROWID_QUERIES = (
    "SELECT rowid, NULL FROM entries NOT INDEXED ORDER BY rowid",
    "SELECT rowid, NULL FROM entries NOT INDEXED ORDER BY rowid DESC",
    "SELECT rowid, id FROM entries INDEXED BY sqlite_autoindex_entries_1 ORDER BY id",
    "SELECT rowid, id FROM entries INDEXED BY sqlite_autoindex_entries_1 ORDER BY id DESC",
    "SELECT rowid, NULL FROM entries INDEXED BY entries_created ORDER BY created_us",
    "SELECT rowid, NULL FROM entries INDEXED BY entries_created ORDER BY created_us DESC",
)
