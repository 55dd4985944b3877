"""Finding text in the sanctum fast: newest dated files first, by date and then by time.

The folders are walked once through their confined descriptors; each file is then opened
by its name relative to its folder's descriptor (never followed), so a search over many
thousand files costs one `openat` and one read per file. A file of ASCII text is matched
as bytes; any other is decoded and matched line by line, case-insensitively either way.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from singularity.sanctum.descriptors import HEAD_FLAGS, MAX_READ_BYTES, TEMP_PREFIX, FolderTree
from singularity.sanctum.names import MEMORY, TENDED, name_date

MAX_OPEN_FOLDERS = 64


@dataclass(frozen=True)
class Found:
    """A file to search: where it is and how it sorts."""

    folder: str
    """Sanctum-relative, with a trailing `/`."""
    name: str
    date: str | None
    mtime_ns: int

    @property
    def path(self) -> str:
        """The sanctum-relative path."""
        return self.folder + self.name


def newest_first(items: Sequence[Found]) -> list[Found]:
    """Dated files first, newest date and then newest time first; the others by path."""
    dated = sorted(
        (item for item in items if item.date is not None),
        key=lambda item: (item.date, item.mtime_ns, item.path),
        reverse=True,
    )
    return dated + sorted((item for item in items if item.date is None), key=lambda i: i.path)


def files_under(store: FolderTree, parts: Sequence[str]) -> list[Found]:
    """Every regular file in the folder and below it (our temp files and `.tended` aside),
    in a sanctum folder (`SanctumStore.files_under`)."""
    found: list[Found] = []

    def visit(path: str, dir_fd: int) -> Sequence[str]:
        dirs: list[str] = []
        with os.scandir(dir_fd) as scan:
            for item in scan:
                if item.is_dir(follow_symlinks=False):
                    dirs.append(item.name)
                elif item.is_file(follow_symlinks=False) and not _hidden(path, item.name):
                    mtime = item.stat(follow_symlinks=False).st_mtime_ns
                    found.append(Found(path, item.name, name_date(item.name), mtime))
        return sorted(dirs)

    store.walk(tuple(parts), visit)
    return found


def _hidden(folder: str, name: str) -> bool:
    return name.startswith(TEMP_PREFIX) or (folder == f"{MEMORY}/" and name == TENDED)


class Searched(Protocol):
    """What `grep` reads of a sanctum, whatever its backend (`seam.Sanctum`)."""

    def files_under(self, parts: Sequence[str]) -> list[Found]: ...

    def contents(self, ordered: Sequence[Found]) -> Iterator[tuple[Found, bytes]]: ...


def grep(
    store: Searched, parts: Sequence[str], query: str, limit: int, width: int
) -> tuple[list[str], bool]:
    """Up to `limit` hits `path:line: text` (text cut to `width`), and whether there were more."""
    needle = query.casefold()
    ascii_needle = needle.encode("ascii") if needle.isascii() else None
    hits: list[str] = []
    for found, data in store.contents(newest_first(store.files_under(parts))):
        if data.isascii() and ascii_needle is not None:
            if ascii_needle not in data.lower():
                continue
            text = data.decode("ascii")
        else:
            text = data.decode("utf-8", "replace")
            if needle not in text.casefold():
                continue
        for number, line in enumerate(text.splitlines(), start=1):
            if needle in line.casefold():
                if len(hits) == limit:
                    return hits, True
                hits.append(f"{found.path}:{number}: {line.strip()[:width]}")
    return hits, False


def contents(store: FolderTree, ordered: Sequence[Found]) -> Iterator[tuple[Found, bytes]]:
    """Each file's bytes (at most 256 KiB), opened beneath its folder's descriptor, in a
    sanctum folder (`SanctumStore.contents`)."""
    folders: dict[str, int] = {}
    try:
        for found in ordered:
            dir_fd = folders.get(found.folder)
            if dir_fd is None:
                if len(folders) >= MAX_OPEN_FOLDERS:
                    os.close(folders.pop(next(iter(folders))))
                parts = tuple(part for part in found.folder.split("/") if part)
                dir_fd = folders[found.folder] = store.open_dir(parts)
            data = _read(dir_fd, found.name)
            if data is not None:
                yield found, data
    finally:
        for dir_fd in folders.values():
            os.close(dir_fd)


def _read(dir_fd: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, HEAD_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None  # removed meanwhile, or not a file any more
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1 or info.st_size > MAX_READ_BYTES:
            return None  # as `read` refuses them
        chunks, total = [], 0
        while total < info.st_size:
            chunk = os.read(fd, MAX_READ_BYTES - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
