"""Reads beneath a sanctum folder's descriptor: its listing and the heads of its files.

Shared by the folder backend (`singularity.sanctum.store`) and the walks over it (the map's
folder scans, grep); a name is opened relative to its folder's descriptor, never followed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from typing import Protocol

TEMP_PREFIX = ".singularity-"
MAX_READ_BYTES = 256 * 1024
HEAD_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class FolderTree(Protocol):
    """What the walks over a sanctum folder need of it (`SanctumStore`): a confined
    descriptor of a folder, and a depth-first visit of a folder and the subfolders it names."""

    def open_dir(self, parts: Sequence[str]) -> int: ...

    def walk(self, parts: Sequence[str], visit: Callable[[str, int], Sequence[str]]) -> None: ...


def read_heads(dir_fd: int, names: Sequence[str], size: int) -> dict[str, str]:
    """The first `size` bytes of each named regular file (never followed) as text."""
    found: dict[str, str] = {}
    for name in names:
        try:
            fd = os.open(name, HEAD_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                found[name] = os.read(fd, size).decode("utf-8", "replace")
        except OSError:
            continue
        finally:
            os.close(fd)
    return found


def scan_fd(dir_fd: int) -> tuple[list[str], list[str]]:
    """The regular files (without our temp files) and the folders of a folder, sorted."""
    files: list[str] = []
    dirs: list[str] = []
    with os.scandir(dir_fd) as scan:
        for item in scan:
            if item.is_dir(follow_symlinks=False):
                dirs.append(item.name)
            elif item.is_file(follow_symlinks=False) and not item.name.startswith(TEMP_PREFIX):
                files.append(item.name)
    files.sort()
    dirs.sort()
    return files, dirs
