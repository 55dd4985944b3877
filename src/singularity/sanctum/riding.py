"""A sanctum folder whose appends ride in the being's durable steps, and the writes of
logged appends (`singularity.sanctum.logged`).

`RidingSanctum` is the folder of a running being in a state directory: `append` hands the
bytes to the being's `steps` (no sync here) and the state store writes them with
`write_logged` once the step's record is durable (failpoint `note.write`). Until then a
read of the file sees them already, so a second append of the same step goes after the
first. `write_logged` is also how a boot writes back what a crash lost: it is idempotent.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from singularity.sanctum.descriptors import MAX_READ_BYTES
from singularity.sanctum.logged import LoggedAppend, Steps
from singularity.sanctum.names import IO, NOT_FOUND, SanctumRefusal, unless_missing
from singularity.sanctum.store import NOT_BOUNDED_MESSAGE, SanctumStore
from singularity.storage import fsio

POINT = "note"
FILE_MODE = 0o600
OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
OTHER_BYTES = "the file holds other bytes where the logged append goes"


class RidingSanctum(SanctumStore):
    """A sanctum folder whose appends ride in the being's next durable step."""

    def __init__(self, root: str, steps: Steps) -> None:
        super().__init__(root)
        self.steps = steps
        self._unwritten: dict[tuple[str, ...], list[LoggedAppend]] = {}
        """Appends handed to `steps` that their file may not hold yet, per file."""

    def append(self, parts: Sequence[str], data: bytes, *, create: bool = False) -> None:
        """Log `data` at the file's end in the next step (made with it, with `create`)."""
        key = tuple(parts)
        unwritten = self._unwritten.setdefault(key, [])
        if unwritten:
            offset = unwritten[-1].end
        else:
            info = unless_missing(lambda: self.at_entry(key, fsio.entry_info))
            if info is None and not create:
                raise SanctumRefusal(NOT_FOUND, "no such file in the sanctum")
            if info is not None and (not stat.S_ISREG(info.st_mode) or info.st_nlink != 1):
                raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
            offset = 0 if info is None else info.st_size
        append = LoggedAppend(self.root, "/".join(key), offset, bytes(data))
        self.steps.ride(append)
        unwritten.append(append)

    def read_bytes(self, parts: Sequence[str], limit: int = MAX_READ_BYTES) -> bytes:
        """The file's bytes with the appends still riding in the next step."""
        unwritten = self._unwritten.get(tuple(parts))
        if not unwritten:
            return super().read_bytes(parts, limit)
        data = unless_missing(lambda: super(RidingSanctum, self).read_bytes(parts, limit)) or b""
        while unwritten and len(data) >= unwritten[0].end:
            unwritten.pop(0)  # written with its step
        for append in unwritten:
            data = data[: append.offset] + append.data
        if len(data) > limit:
            raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
        return data


def write_logged(sanctum: SanctumStore, append: LoggedAppend) -> int:
    """Make the file hold a logged append's bytes at its offset, without a sync.

    The bytes are written when the file ends at the offset or part of the way into them
    (a write a crash cut short); a missing file is made for an append at offset 0; a
    file holding them already is left alone. Returns how many bytes were written; a
    refusal when the file holds other bytes there (it changed since).
    """

    def put(dir_fd: int, name: str) -> int:
        flags = OPEN_FLAGS | (os.O_CREAT if append.offset == 0 else 0)
        fd = os.open(name, flags, FILE_MODE, dir_fd=dir_fd)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
            held = fsio.read_range(fd, append.offset, min(info.st_size, append.end))
            holding = _holding(info.st_size, held, append)
            if holding:
                return 0
            if holding is None:
                raise SanctumRefusal(IO, OTHER_BYTES)
            fsio.failpoint(f"{POINT}.write")
            fsio.write_at(fd, append.offset + len(held), append.data[len(held) :])
            return len(append.data) - len(held)
        finally:
            os.close(fd)

    return sanctum.at_entry(append.parts, put, create=append.offset == 0)


def read_logged(sanctum: SanctumStore, append: LoggedAppend) -> bytes | None:
    """The bytes of the file an append goes into (read only); None when it is missing."""
    try:
        return sanctum.read_bytes(append.parts, 1 << 40)
    except SanctumRefusal as refusal:
        if refusal.code == NOT_FOUND:
            return None
        raise


def holds_logged(data: bytes | None, append: LoggedAppend) -> bool | None:
    """Whether a file's bytes hold the append: True; False when `write_logged` would write
    some of it (a write a crash cut short, a file it makes missing); None when the file
    holds other bytes there."""
    if data is None:
        return False if append.offset == 0 else None
    return _holding(len(data), data[append.offset : append.end], append)


def _holding(size: int, held: bytes, append: LoggedAppend) -> bool | None:
    """`holds_logged` of a file of `size` bytes holding `held` where the append goes."""
    if held == append.data:
        return True
    cut_short = size == append.offset + len(held)
    return False if cut_short and append.data.startswith(held) else None


def sync_logged(sanctum: SanctumStore, parts: Sequence[str], *, entry: bool) -> bool:
    """fdatasync a file logged appends wrote (and its folder, with `entry`: the file is
    new); False when it is not there to sync."""

    def sync_file(dir_fd: int, name: str) -> bool:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            return False
        try:
            fsio.sync(fd, f"{POINT}.fsync", data_only=True)
        finally:
            os.close(fd)
        if entry:
            fsio.fsync_dir(dir_fd, POINT)
        return True

    return unless_missing(lambda: sanctum.at_entry(parts, sync_file)) or False
