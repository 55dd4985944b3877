"""The one I/O seam for everything the runtime persists.

Every durable write goes through here: create-exclusive temp files, full writes, file
fsync, rename, directory fsync, and fsynced appends. Every fsync and fdatasync of the
runtime is a call of `sync`, so a test can see each one. Each step passes a named
failpoint, so tests can crash the process (`kill`) or fail the step (`eio`,
`enospc`) at an exact place; only tests arm them (`arm_failpoints`). Functions raise
`OSError`; callers decide whether a failure is fatal (state) or reported to the model
(workspace files).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import uuid
from dataclasses import dataclass

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_MODE = 0o600

_ACTIONS = {"kill", "eio", "enospc"}


@dataclass
class _Failpoint:
    action: str
    at_hit: int
    hits: int = 0


_armed: dict[str, _Failpoint] = {}


def arm_failpoints(spec: str) -> None:
    """Arm failpoints from `name=action[@N],…` (action: kill, eio, enospc; N: the Nth hit)."""
    _armed.clear()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, rest = item.partition("=")
        action, _, nth = rest.partition("@")
        if not sep or action not in _ACTIONS or (nth and not nth.isdigit()) or nth == "0":
            raise ValueError(f"invalid failpoint: {item!r}")
        _armed[name.strip()] = _Failpoint(action, int(nth) if nth else 1)


def failpoint(name: str) -> None:
    """Pass the named failpoint: crash or fail here when it is armed for this hit."""
    point = _armed.get(name)
    if point is None:
        return
    point.hits += 1
    if point.hits != point.at_hit:
        return
    if point.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    code = errno.EIO if point.action == "eio" else errno.ENOSPC
    raise OSError(code, f"{os.strerror(code)} (failpoint {name})")


def open_dir(path: str | os.PathLike[str], dir_fd: int | None = None) -> int:
    """Open a directory without following a final symlink."""
    return os.open(path, DIR_FLAGS, dir_fd=dir_fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte, looping over short writes."""
    written = os.write(fd, data)
    if written == len(data):  # the usual write: whole
        return
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_range(fd: int, start: int, stop: int) -> bytes:
    """The bytes of an open file from `start` up to `stop` (fewer where it ends first)."""
    chunks, offset = [], start
    while offset < stop:
        chunk = os.pread(fd, stop - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def write_at(fd: int, offset: int, data: bytes) -> None:
    """Write every byte at `offset` of an open file, looping over short writes."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def sync(fd: int, name: str, *, data_only: bool = False) -> None:
    """Pass the failpoint `name`, then fsync `fd` (fdatasync with `data_only`).

    The only place the runtime syncs a descriptor.
    """
    failpoint(name)
    if data_only:
        os.fdatasync(fd)
    else:
        os.fsync(fd)


def fsync_dir(dir_fd: int, point: str) -> None:
    """Make renames and creations in a directory durable."""
    sync(dir_fd, f"{point}.dirsync")


def sync_dir_at(path: str | os.PathLike[str], point: str) -> None:
    """Open the directory at `path`, make the renames and creations in it durable, close it."""
    dir_fd = open_dir(path)
    try:
        fsync_dir(dir_fd, point)
    finally:
        os.close(dir_fd)


def make_dir(dir_fd: int, name: str, mode: int, point: str) -> None:
    """Create the directory `name` (or find it made meanwhile) and make its entry durable."""
    failpoint(f"{point}.mkdir")
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, mode, dir_fd=dir_fd)
    fsync_dir(dir_fd, point)


def temp_name(prefix: str) -> str:
    """A unique temp file name of our own pattern: `<prefix><uuid4>.tmp`."""
    return f"{prefix}{uuid.uuid4()}.tmp"


def _write_synced(dir_fd: int, tmp: str, data: bytes, point: str) -> None:
    """Create the temp file exclusively, write all of `data`, fsync; remove it on failure."""
    fd = os.open(tmp, TEMP_FLAGS, FILE_MODE, dir_fd=dir_fd)
    try:
        try:
            failpoint(f"{point}.write")
            write_all(fd, data)
            sync(fd, f"{point}.fsync")
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def replace_file(dir_fd: int, name: str, data: bytes, *, temp_prefix: str, point: str) -> None:
    """Durably replace `name` in the directory: temp, write, fsync, rename, fsync directory.

    On any failure before the rename the temp file is removed and the old file is left
    untouched. The rename replaces a final-component symlink rather than following it.
    """
    tmp = temp_name(temp_prefix)
    _write_synced(dir_fd, tmp, data, point)
    try:
        failpoint(f"{point}.rename")
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    fsync_dir(dir_fd, point)


def open_append(dir_fd: int, name: str, point: str) -> int:
    """Open a file for fsynced appends, creating it 0600 (and syncing the directory) if new."""
    try:
        return os.open(name, APPEND_FLAGS & ~os.O_CREAT, dir_fd=dir_fd)
    except FileNotFoundError:
        fd = os.open(name, APPEND_FLAGS, FILE_MODE, dir_fd=dir_fd)
        fsync_dir(dir_fd, point)
        return fd


def append_durably(fd: int, data: bytes, point: str) -> None:
    """Append bytes and fsync them before returning."""
    failpoint(f"{point}.write")
    write_all(fd, data)
    sync(fd, f"{point}.fsync", data_only=True)


def truncate_durably(fd: int, length: int, point: str) -> None:
    """Cut a file to `length` bytes and fsync."""
    failpoint(f"{point}.truncate")
    os.ftruncate(fd, length)
    sync(fd, f"{point}.truncsync")


def entry_info(dir_fd: int, name: str) -> os.stat_result | None:
    """The entry `name` in the directory (a symlink is never followed); None when absent."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_at(dir_fd: int, name: str, limit: int) -> bytes:
    """Read at most `limit` bytes of a regular file in the directory, without following links."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        chunks: list[bytes] = []
        remaining = limit
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def create_file(dir_fd: int, name: str, data: bytes, *, temp_prefix: str, point: str) -> bool:
    """Durably create `name` only if it is absent (write-once); False when it already exists.

    The data is written and fsynced in a temp file that is then hard-linked to `name`,
    which the kernel refuses atomically when the name exists; the temp name is removed
    either way. A crash between link and unlink leaves a temp of our own pattern.
    """
    tmp = temp_name(temp_prefix)
    _write_synced(dir_fd, tmp, data, point)
    try:
        failpoint(f"{point}.link")
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            return False
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
    fsync_dir(dir_fd, point)
    return True


def remove_file(dir_fd: int, name: str, *, point: str) -> None:
    """Durably remove `name` from the directory (a symlink itself, never its target)."""
    failpoint(f"{point}.unlink")
    os.unlink(name, dir_fd=dir_fd)
    fsync_dir(dir_fd, point)


def move_file(dir_fd: int, name: str, new_name: str, *, point: str) -> None:
    """Durably rename `name` to `new_name` in the directory; an existing `new_name` is kept.

    The new name is linked first, which the kernel refuses when it exists, then the old one
    is unlinked, and the directory is synced.
    """
    failpoint(f"{point}.link")
    os.link(name, new_name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    os.unlink(name, dir_fd=dir_fd)
    fsync_dir(dir_fd, point)
