"""The sanctum as a folder of files (a `Sanctum` backend): every path resolves beneath its
root through `Workspace`.

The sanctum reuses the workspace confinement primitive (openat2 with RESOLVE_BENEATH,
or the component walk): a path is parsed by the same grammar, opened as a descriptor
beneath the root descriptor, and never handed on as a checked string. Writes go through
`fsio` (temp file, fsync, rename or link, directory fsync; an append is one write and one
fdatasync) at the failpoint `sanctum`.
Every failure becomes a `SanctumRefusal` with a tool error code.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from singularity.errors import StateError
from singularity.sanctum import scan, search
from singularity.sanctum.descriptors import MAX_READ_BYTES, TEMP_PREFIX, read_heads, scan_fd
from singularity.sanctum.names import BOUNDARY, IO, NOT_FOUND, SanctumRefusal, unless_missing
from singularity.sanctum.reads import TextReads
from singularity.secrets import os_error_text
from singularity.storage import fsio
from singularity.storage.statedir import check_owned_directory
from singularity.tools.confinement import (
    DIR_FLAGS,
    PATH_MESSAGE,
    InvalidPath,
    Workspace,
    WorkspaceEscape,
    parse_path,
)
from singularity.tools.files import NotBoundedRegularFile, read_bounded

POINT = "sanctum"
BOUNDARY_MESSAGE = "path leaves the sanctum"
NOT_BOUNDED_MESSAGE = "path is not a bounded regular file"
DIR_MODE = 0o700
APPEND_FLAGS = (
    os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
)


@dataclass(frozen=True)
class Entry:
    """One directory entry: name, what it is (symlinks are `other`), size of a file."""

    name: str
    kind: Literal["file", "dir", "other"]
    size: int = 0
    mtime_ns: int = 0


@dataclass(frozen=True)
class Folder:
    """A folder of the sanctum (relative path with a trailing `/`), its files and subfolders."""

    path: str
    files: list[str]
    dirs: list[str]


def ensure_root(root: str) -> None:
    """Create the sanctum directory 0700 if missing; refuse a symlink or another owner's."""
    try:
        if not os.path.lexists(root):
            parent = os.path.dirname(root)
            os.makedirs(parent, DIR_MODE, exist_ok=True)
            try:
                os.mkdir(root, DIR_MODE)
            except FileExistsError:
                pass
            fsio.sync_dir_at(parent, POINT)
        check_owned_directory(root, "sanctum")
        fd = fsio.open_dir(root)
        try:
            os.fchmod(fd, DIR_MODE)
        finally:
            os.close(fd)
    except OSError as error:
        raise StateError(f"cannot open sanctum {root}: {os_error_text(error)}") from None


def parts_of(text: str) -> tuple[str, ...]:
    """The normal components of a sanctum path, or a `sanctum_boundary` refusal."""
    try:
        return parse_path(text)
    except InvalidPath:
        raise SanctumRefusal(BOUNDARY, PATH_MESSAGE) from None


T = TypeVar("T")


def _refusal(error: OSError) -> SanctumRefusal:
    if error.errno == errno.ENOENT:
        return SanctumRefusal(NOT_FOUND, "no such file in the sanctum")
    if error.errno in (errno.ENXIO, errno.ELOOP, errno.EISDIR, errno.ENOTDIR):
        return SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
    return SanctumRefusal(IO, os_error_text(error))


class SanctumStore(TextReads):
    """The open sanctum root; reads, writes and listings, all confined beneath it."""

    def __init__(self, root: str) -> None:
        """Open an existing sanctum directory (see `ensure_root`)."""
        self.root = root
        self.workspace = Workspace(root, point=POINT)

    def close(self) -> None:
        """Close the root descriptor."""
        self.workspace.close()

    def remove_stale_temps(self) -> int:
        """Remove our own leftover temp files (at boot)."""
        return self.workspace.remove_stale_temps()

    def open_dir(self, parts: Sequence[str], *, create: bool = False) -> int:
        """A descriptor of the folder `parts` (the root when empty), confined."""
        try:
            return self.workspace.open_dir(parts, create=create)
        except WorkspaceEscape:
            raise SanctumRefusal(BOUNDARY, BOUNDARY_MESSAGE) from None
        except OSError as error:
            raise _refusal(error) from None

    def make_dir(self, parts: Sequence[str]) -> None:
        """Create the folder `parts` (0700) and its parents if missing."""
        os.close(self.open_dir(parts, create=True))

    def _open_file(self, parts: Sequence[str]) -> int:
        try:
            return self.workspace.open_file(parts)
        except WorkspaceEscape:
            raise SanctumRefusal(BOUNDARY, BOUNDARY_MESSAGE) from None
        except OSError as error:
            raise _refusal(error) from None

    def read_bytes(self, parts: Sequence[str], limit: int = MAX_READ_BYTES) -> bytes:
        """Every byte of a regular, singly linked file of at most `limit` bytes."""
        fd = self._open_file(parts)
        try:
            return read_bounded(fd, limit)
        except NotBoundedRegularFile:
            raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE) from None
        except OSError as error:
            raise _refusal(error) from None
        finally:
            os.close(fd)

    def read_head(self, parts: Sequence[str], limit: int) -> tuple[bytes, int]:
        """The first `limit` bytes of a regular, singly linked file of any size, and its size."""
        fd = self._open_file(parts)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
            chunks, total = [], 0
            while total < limit:
                chunk = os.read(fd, limit - total)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            return b"".join(chunks), max(info.st_size, total)
        except OSError as error:
            raise _refusal(error) from None
        finally:
            os.close(fd)

    def exists(self, parts: Sequence[str]) -> bool:
        """Whether `parts` names an entry of any type (its last component is not followed)."""
        return self._lstat(parts) is not None

    def is_file(self, parts: Sequence[str]) -> bool:
        """Whether `parts` names a regular file (its last component is not followed)."""
        info = self._lstat(parts)
        return info is not None and stat.S_ISREG(info.st_mode)

    def stamp(self, parts: Sequence[str]) -> tuple[int, int, int] | None:
        """What changes when the entry changes: mtime, size, inode (None when missing)."""
        info = self._lstat(parts)
        return None if info is None else (info.st_mtime_ns, info.st_size, info.st_ino)

    def _lstat(self, parts: Sequence[str]) -> os.stat_result | None:
        return unless_missing(lambda: self.at_entry(parts, fsio.entry_info))

    def at_entry(
        self, parts: Sequence[str], run: Callable[[int, str], T], *, create: bool = False
    ) -> T:
        """`run(parent descriptor, name)` for the entry at `parts`; an OS error is a refusal."""
        dir_fd = self.open_dir(parts[:-1], create=create)
        try:
            return run(dir_fd, parts[-1])
        except OSError as error:
            raise _refusal(error) from None
        finally:
            os.close(dir_fd)

    def replace(self, parts: Sequence[str], data: bytes) -> None:
        """Durably create or replace a regular file; a symlink or other destination is refused."""

        def replace_regular(dir_fd: int, name: str) -> None:
            info = fsio.entry_info(dir_fd, name)
            if info is not None and not stat.S_ISREG(info.st_mode):
                raise SanctumRefusal(IO, "destination is not a regular file")
            fsio.replace_file(dir_fd, name, data, temp_prefix=TEMP_PREFIX, point=POINT)

        self.at_entry(parts, replace_regular, create=True)

    def append(self, parts: Sequence[str], data: bytes, *, create: bool = False) -> None:
        """Durably append to an existing regular, singly linked file: one write and one
        fdatasync, no temp file, no rename and no directory sync (the name is durable
        already). A symlink, another kind of file or a missing one is refused; with
        `create`, a missing one is made holding `data` (temp, fsync, link, directory fsync)."""
        if create and not self.is_file(parts) and self.create(parts, data):
            return

        def append_regular(dir_fd: int, name: str) -> None:
            fd = os.open(name, APPEND_FLAGS, dir_fd=dir_fd)
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                    raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
                fsio.append_durably(fd, data, POINT)
            finally:
                os.close(fd)

        self.at_entry(parts, append_regular)

    def create(self, parts: Sequence[str], data: bytes) -> bool:
        """Durably create a file that must not exist yet; False (nothing written) if it does."""

        def create_new(dir_fd: int, name: str) -> bool:
            return fsio.create_file(dir_fd, name, data, temp_prefix=TEMP_PREFIX, point=POINT)

        return self.at_entry(parts, create_new, create=True)

    def remove(self, parts: Sequence[str]) -> None:
        """Durably remove one regular file."""

        def remove_regular(dir_fd: int, name: str) -> None:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                raise SanctumRefusal(IO, NOT_BOUNDED_MESSAGE)
            fsio.remove_file(dir_fd, name, point=POINT)

        self.at_entry(parts, remove_regular)

    def entries(self, parts: Sequence[str]) -> list[Entry]:
        """The entries of a folder, sizes of files included (symlinks are never followed)."""
        dir_fd = self.open_dir(parts)
        try:
            found = []
            with os.scandir(dir_fd) as scan:
                for item in scan:
                    found.append(_entry(item))
            return found
        except OSError as error:
            raise _refusal(error) from None
        finally:
            os.close(dir_fd)

    def walk(self, parts: Sequence[str], visit: Callable[[str, int], Sequence[str]]) -> None:
        """Call `visit(path, dir_fd)` on a folder, then depth first on the subfolders it names."""
        dir_fd = unless_missing(lambda: self.open_dir(parts))
        if dir_fd is None:
            return
        try:
            _visit(dir_fd, "/".join(parts) + "/" if parts else "", visit)
        except OSError as error:
            raise _refusal(error) from None
        finally:
            os.close(dir_fd)

    def tree(self, parts: Sequence[str]) -> list[Folder]:
        """The folder and every subfolder below it, depth first (none when it is missing)."""
        folders: list[Folder] = []

        def visit(path: str, dir_fd: int) -> Sequence[str]:
            files, dirs = scan_fd(dir_fd)
            folders.append(Folder(path, files, dirs))
            return dirs

        self.walk(parts, visit)
        return folders

    def heads(self, parts: Sequence[str], names: Sequence[str], size: int) -> dict[str, str]:
        """The first `size` bytes of each named regular file in a folder, as text."""
        dir_fd = self.open_dir(parts)
        try:
            return read_heads(dir_fd, names, size)
        finally:
            os.close(dir_fd)

    def files_under(self, parts: Sequence[str]) -> list[search.Found]:
        """Every regular file in the folder and below it (our temp files and `.tended` aside)."""
        return search.files_under(self, parts)

    def contents(self, ordered: Sequence[search.Found]) -> Iterator[tuple[search.Found, bytes]]:
        """Each file's bytes (at most 256 KiB), opened beneath its folder's descriptor."""
        return search.contents(self, ordered)

    def scan_tree(self, top: str, cache: scan.MapCache | None) -> list[scan.FolderScan]:
        """Summaries of `top` and every folder below it, reused from `cache` while unchanged."""
        return scan.scan_tree(self, top, cache)


def _entry(item: os.DirEntry[str]) -> Entry:
    if item.is_dir(follow_symlinks=False):
        return Entry(item.name, "dir")
    if item.is_file(follow_symlinks=False):
        info = item.stat(follow_symlinks=False)
        return Entry(item.name, "file", info.st_size, info.st_mtime_ns)
    return Entry(item.name, "other")


def _visit(dir_fd: int, prefix: str, visit: Callable[[str, int], Sequence[str]]) -> None:
    for name in visit(prefix, dir_fd):
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue  # removed meanwhile, or not a directory any more
        try:
            _visit(child, f"{prefix}{name}/", visit)
        finally:
            os.close(child)
