"""Folder summaries for the memory map, reused while their folder is unchanged.

Each folder is summarised once (file count, newest dated files, dates, undistilled raw
files) and the summary is kept under the folder's identity and change times. The next
wake only stats each folder, so waking a sanctum of many files costs about what waking a
small one does. A folder changed less than two seconds before it was read is never
reused ("racy" timestamps: two changes within one clock tick share an mtime). A raw file
edited in place, which leaves its folder's times alone, is seen once its folder changes;
the tools always replace files, which does change them.
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from singularity.sanctum.descriptors import FolderTree, read_heads, scan_fd
from singularity.sanctum.names import TENDED, name_date

NEWEST = 8
RAW_SCAN_CHARS = 2000
RACY_NS = 2_000_000_000
Dated = tuple[str, int, str, str]
"""(date, modification time in ns, name, sanctum-relative path): newest is largest, so two
notes of one day are ordered by when they were written, not by name."""


@dataclass(frozen=True)
class FolderScan:
    """What the map needs of one folder."""

    path: str
    files: int
    dirs: tuple[str, ...]
    newest: tuple[Dated, ...]
    dates: tuple[str, ...]
    """The dates of its dated files, sorted."""
    undistilled: tuple[str, ...] = ()


def is_undistilled(head: str) -> bool:
    """Whether a line of the first 2000 characters is `status: raw`."""
    return any(line.strip() == "status: raw" for line in head[:RAW_SCAN_CHARS].splitlines())


def summarize(path: str, dir_fd: int, *, raw: bool) -> FolderScan:
    """Read one folder (and, for raw files, the head of each)."""
    files, dirs = scan_fd(dir_fd)
    return summary(
        path,
        files,
        dirs,
        lambda name: _mtime(dir_fd, name),
        lambda names: read_heads(dir_fd, names, RAW_SCAN_CHARS * 4),
        raw=raw,
    )


def summary(
    path: str,
    files: list[str],
    dirs: list[str],
    mtime: Callable[[str], int],
    heads: Callable[[list[str]], Mapping[str, str]],
    *,
    raw: bool,
) -> FolderScan:
    """One folder's summary from its sorted file and folder names; `mtime` and `heads` are
    asked only for what the summary needs (a backend's reads)."""
    if path == "memory/":
        files = [name for name in files if name != TENDED]
    days = sorted(day for name in files if (day := name_date(name)))
    # Only files that can be among the newest need their time (a stat each).
    cutoff = days[-NEWEST] if len(days) >= NEWEST else ""
    dated = [
        (day, mtime(name) if day >= cutoff else 0, name, path + name)
        for name in files
        if (day := name_date(name))
    ]
    undistilled: tuple[str, ...] = ()
    if raw:
        found = heads(files)
        undistilled = tuple(path + name for name in files if is_undistilled(found.get(name, "")))
    return FolderScan(
        path,
        len(files),
        tuple(dirs),
        tuple(heapq.nlargest(NEWEST, dated)),
        tuple(days),
        undistilled,
    )


def _mtime(dir_fd: int, name: str) -> int:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mtime_ns
    except OSError:
        return 0  # removed meanwhile


class MapCache:
    """Folder summaries by path, each with the folder's identity and change times."""

    def __init__(self) -> None:
        """Start empty."""
        self._folders: dict[str, tuple[tuple[int, ...], FolderScan]] = {}

    def folder(self, path: str, dir_fd: int, *, raw: bool) -> FolderScan:
        """The folder's summary, read again only when the folder changed."""
        info = os.fstat(dir_fd)
        key = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
        hit = self._folders.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        found = summarize(path, dir_fd, raw=raw)
        if time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) > RACY_NS:
            self._folders[path] = (key, found)
        else:
            self._folders.pop(path, None)
        return found


def scan_tree(store: FolderTree, top: str, cache: MapCache | None) -> list[FolderScan]:
    """Summaries of `top` (`memory` or `raw`) and every folder below it, depth first, in
    a sanctum folder (`SanctumStore.scan_tree`)."""
    found: list[FolderScan] = []
    raw = top == "raw"

    def visit(path: str, dir_fd: int) -> Sequence[str]:
        scan = (
            cache.folder(path, dir_fd, raw=raw)
            if cache is not None
            else summarize(path, dir_fd, raw=raw)
        )
        found.append(scan)
        return scan.dirs

    store.walk((top,), visit)
    return found
