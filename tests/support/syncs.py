"""See every sync the runtime makes, and check that what it wrote is durable.

`SyncLog` wraps `fsio.sync` (the one place the runtime fsyncs or fdatasyncs) and records,
for each call, which file or directory the descriptor was, its size and, for a
directory, the entries it held: what that sync made durable. `problems(root)` then tells
whether everything under `root` is durable right now:

- a regular file's current content was synced: a recorded sync of the same inode at its
  current size (an append not followed by fdatasync leaves the file longer than that);
- every entry (file or directory) was made durable by a recorded sync of its directory
  that already listed it under that name, with that inode (a created or renamed file
  whose directory was not fsynced fails here);
- every name the last recorded sync of a directory listed is still there (a removed
  file whose directory was not fsynced since may come back after a crash).

The log holds every inode it has seen open until `close`, so the kernel cannot hand an
inode number it recorded to a new file: an identity (device, inode) always names the
same file, and a stale sync can never vouch for a later file.

A being's `activity.jsonl` and `conversation.jsonl` are synced at checkpoints only: what a
step appends to them between checkpoints is durable in `state.redo` beside them, whose
record was fdatasynced first. Such a file counts as durable when everything past its
last sync is held by the log: the log itself synced at its current size, its records
covering the journal from where the checkpoint left it, and the archive synced at least
up to the messages the checkpoint archived. So does a sanctum file the runtime's session
notes went into (`singularity.store.sanctum_appends`): its content past its last sync, and
its name when a note made it, are held by appends that such a log carries.

`watch` makes the check run at the moments a crash must find everything durable: before
each model call, each tool call and each state commit (the fdatasync of a step's record
in `state.redo`, or the fsync of a new `state.json`).
Problems are collected in `failures` (raising inside the being would be journaled as a
warning, not fail the test); `checked` counts, per file, the moments it was found
durable, so a test can assert that what it claims to cover was really written and seen.
"""

from __future__ import annotations

import collections
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from singularity.domain.state import parse_state
from singularity.gateway.client import BramaClient
from singularity.sanctum.logged import LoggedAppend
from singularity.storage import fsio
from singularity.storage.activity import ACTIVITY_FILE
from singularity.storage.conversation_archive import ARCHIVE_FILE
from singularity.storage.statedir import STATE_FILE
from singularity.store import redo
from singularity.tools.catalogue import Catalogue

Identity = tuple[int, int]
# Temp files of the `fsio` pattern (`<prefix><uuid4>.tmp`): in flight, never durable.
TEMP_NAME = re.compile(r".*[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}\.tmp")
# Files whose durability is not ours to give: SQLite syncs its own, a lock file holds no data.
NOT_OURS = re.compile(r".*\.(db|sqlite3?)(-wal|-shm|-journal)?|(.*\.)?lock")
# The syncs that make a checkpoint (the temp file of a new `state.json`) and a step (its
# record in `state.redo`) durable: the moments a commit happens.
STATE_COMMIT = "state.fsync"
STEP_COMMIT = "redo.fsync"


@dataclass(frozen=True)
class Sync:
    """One `fsio.sync` call, as the descriptor was just before the system call."""

    name: str
    path: str
    identity: Identity
    size: int
    data_only: bool
    entries: Mapping[str, Identity] | None  # a directory's entries; None for a file

    @property
    def is_dir(self) -> bool:
        return self.entries is not None


def _identity(info: os.stat_result) -> Identity:
    return info.st_dev, info.st_ino


PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class SyncLog:
    """The syncs seen so far, and the durability checks made at each watched moment."""

    syncs: list[Sync] = field(default_factory=list)
    roots: list[Path] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    checked: collections.Counter[str] = field(default_factory=collections.Counter)
    moments: collections.Counter[str] = field(default_factory=collections.Counter)

    # Every inode seen is held open until `close`, so no inode number is reused meanwhile
    # and an identity always names the same file.
    held: dict[Identity, int] = field(default_factory=dict)

    def record(self, fd: int, name: str, data_only: bool) -> None:
        """Note what `fd` is right now: what the sync about to happen makes durable."""
        path = os.readlink(f"/proc/self/fd/{fd}")
        info = os.fstat(fd)
        self._hold(os.dup(fd))
        entries = self._entries(fd) if stat.S_ISDIR(info.st_mode) else None
        self.syncs.append(Sync(name, path, _identity(info), info.st_size, data_only, entries))

    def _hold(self, fd: int) -> Identity:
        identity = _identity(os.fstat(fd))
        if identity in self.held:
            os.close(fd)
        else:
            self.held[identity] = fd
        return identity

    def _entries(self, dir_fd: int) -> dict[str, Identity]:
        listed: dict[str, Identity] = {}
        for name in os.listdir(dir_fd):
            try:
                listed[name] = self._hold(os.open(name, PATH_FLAGS, dir_fd=dir_fd))
            except FileNotFoundError:
                continue
        return listed

    def close(self) -> None:
        """Let go of every inode held."""
        for fd in self.held.values():
            os.close(fd)
        self.held.clear()

    def of(self, path: str | os.PathLike[str]) -> list[Sync]:
        """The syncs of the file or directory now at `path` (same inode), oldest first."""
        identity = _identity(os.stat(path, follow_symlinks=False))
        return [sync for sync in self.syncs if sync.identity == identity]

    def entry_synced(self, path: Path) -> bool:
        """Whether a sync of `path`'s directory listed it, under its name, as it is now."""
        identity = _identity(os.stat(path, follow_symlinks=False))
        parent = _identity(os.stat(path.parent))
        return any(
            sync.identity == parent
            and sync.entries is not None
            and sync.entries.get(path.name) == identity
            for sync in self.syncs
        )

    def content_synced(self, path: Path) -> bool:
        """Whether the file at `path` was synced at its current size (its inode, not a copy).

        An empty file has no content to lose: its directory entry is all there is.
        """
        info = os.stat(path, follow_symlinks=False)
        return info.st_size == 0 or any(
            sync.identity == _identity(info) and sync.size == info.st_size and not sync.is_dir
            for sync in self.syncs
        )

    def synced_size(self, path: Path) -> int:
        """The largest size at which the file now at `path` was synced (0 if never)."""
        identity = _identity(os.stat(path, follow_symlinks=False))
        return max(
            (s.size for s in self.syncs if s.identity == identity and not s.is_dir), default=0
        )

    def held_by_log(self, path: Path) -> bool:
        """Whether what the being's journal or archive at `path` holds past its last sync is
        durable in the synced `state.redo` beside it (module docstring)."""
        if path.name not in (ACTIVITY_FILE, ARCHIVE_FILE):
            return False
        log_path, state_path = path.parent / redo.REDO_FILE, path.parent / STATE_FILE
        if not (log_path.exists() and state_path.exists()) or not self.content_synced(log_path):
            return False
        checkpoint = state_path.read_bytes()
        scanned = redo.scan(log_path.read_bytes())
        if scanned.torn_bytes or scanned.base != redo.checkpoint_id(checkpoint):
            return False
        synced = self.synced_size(path)
        if path.name == ACTIVITY_FILE:
            records = scanned.records
            return bool(records) and (
                records[0].activity_at <= synced and path.stat().st_size <= records[-1].activity_end
            )
        archived = parse_state(checkpoint).mind.conversation_archived
        return path.read_bytes()[:synced].count(b"\n") >= archived

    def logged_appends(self, path: Path) -> list[LoggedAppend]:
        """The appends to the file at `path` that a synced, current `state.redo` of a
        watched root carries, in order."""
        for root in self.roots:
            log_path, state_path = root / redo.REDO_FILE, root / STATE_FILE
            if not (log_path.exists() and state_path.exists()) or not self.content_synced(log_path):
                continue
            scanned = redo.scan(log_path.read_bytes())
            if scanned.torn_bytes or scanned.base != redo.checkpoint_id(state_path.read_bytes()):
                continue
            return [
                append
                for append in scanned.appends
                if os.path.realpath(root / append.root / append.path) == os.path.realpath(path)
            ]
        return []

    def held_by_appends(self, path: Path) -> bool:
        """Whether what the file holds past its last sync is held by logged appends."""
        appends = self.logged_appends(path)
        return bool(appends) and (
            appends[0].offset <= self.synced_size(path) and path.stat().st_size <= appends[-1].end
        )

    def made_by_appends(self, path: Path) -> bool:
        """Whether a logged append makes the file (its name is held by the log)."""
        return any(append.offset == 0 for append in self.logged_appends(path))

    def removals_synced(self, directory: Path) -> list[str]:
        """The names the last recorded sync of `directory` listed that are gone from it."""
        identity = _identity(os.stat(directory, follow_symlinks=False))
        last = next(
            (s for s in reversed(self.syncs) if s.identity == identity and s.entries is not None),
            None,
        )
        if last is None or last.entries is None:
            return []
        present = set(os.listdir(directory))
        return sorted(name for name in last.entries if name not in present and _ours(name))

    def problems(self, root: Path) -> list[str]:
        """What under `root` (the root itself excluded) is not durable now, one line each."""
        found: list[str] = []
        for directory in (root, *(path for path in _tree(root) if path.is_dir())):
            found += [
                f"{directory / name}: removal not synced in its directory"
                for name in self.removals_synced(directory)
            ]
        for path in _tree(root):
            if not _ours(path.name):
                continue
            if not self.entry_synced(path) and not self.made_by_appends(path):
                found.append(f"{path}: entry not synced in its directory")
            elif (
                path.is_file()
                and not path.is_symlink()
                and not self.content_synced(path)
                and not self.held_by_log(path)
                and not self.held_by_appends(path)
            ):
                found.append(f"{path}: content not synced at {path.stat().st_size} bytes")
            else:
                self.checked[str(path)] += 1
        return found

    def check(self, moment: str) -> None:
        """Check every watched root now; record what is not durable, and where."""
        self.moments[moment.split(" ", 1)[0]] += 1
        for root in self.roots:
            if root.exists():
                self.failures.extend(f"before {moment}: {line}" for line in self.problems(root))

    def failures_of(self, path: Path) -> list[str]:
        """The recorded failures about `path` itself."""
        return [line for line in self.failures if f": {path}: " in line]

    def times_checked(self, path: Path) -> int:
        """How many watched moments found `path` durable."""
        return self.checked[str(path)]

    def watch(self, monkeypatch: pytest.MonkeyPatch, *roots: Path) -> None:
        """Check `roots` before every model call, tool call and state commit."""
        self.roots.extend(roots)
        complete = BramaClient.complete
        dispatch = Catalogue.dispatch

        async def checked_complete(client: BramaClient, *args: Any, **kwargs: Any) -> Any:
            self.check("model call")
            return await complete(client, *args, **kwargs)

        async def checked_dispatch(catalogue: Catalogue, name: str, arguments: str) -> Any:
            self.check(f"tool call {name}")
            return await dispatch(catalogue, name, arguments)

        monkeypatch.setattr(BramaClient, "complete", checked_complete)
        monkeypatch.setattr(Catalogue, "dispatch", checked_dispatch)


def _ours(name: str) -> bool:
    """Whether a name is ours to make durable: not a temp in flight, not another program's."""
    return not (TEMP_NAME.fullmatch(name) or NOT_OURS.fullmatch(name))


def _tree(root: Path) -> Iterator[Path]:
    for directory, dirnames, filenames in os.walk(root):
        base = Path(directory)
        for name in (*dirnames, *filenames):
            yield base / name


def install(monkeypatch: pytest.MonkeyPatch) -> SyncLog:
    """Record every `fsio.sync` from now on (state commits check the watched roots first).

    Call `close` on the log when done with it.
    """
    log = SyncLog()
    real = fsio.sync

    def recorded(fd: int, name: str, *, data_only: bool = False) -> None:
        if name == STATE_COMMIT:
            log.check("state commit")
        log.record(fd, name, data_only)
        real(fd, name, data_only=data_only)
        if name == STEP_COMMIT:
            log.check("state commit")  # the step's record, in the file checked, is durable now

    monkeypatch.setattr(fsio, "sync", recorded)
    return log


def names_of(syncs: Iterable[Sync]) -> list[str]:
    """The failpoint names of `syncs`, in order."""
    return [sync.name for sync in syncs]
