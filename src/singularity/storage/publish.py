"""A new directory that appears whole or not at all: filled beside it, then renamed in.

`publish_directory` fills a 0700 temp directory next to the destination (its name starts
with `.`, ends with `.tmp`), syncs every file and folder in it, renames it to the
destination and syncs the parent. A failure removes the temp directory; a kill leaves it
(the destination never exists half-written). The destination must not exist yet, or be
an empty directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Callable

from singularity.errors import StateError
from singularity.secrets import os_error_text
from singularity.storage import fsio
from singularity.storage.statedir import create_private_directory

DIR_MODE = 0o700
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_new_file(dir_fd: int, name: str, data: bytes, point: str) -> None:
    """Create `name` (0600, it must not exist), write every byte and fsync it."""
    fd = os.open(name, NEW_FILE_FLAGS, fsio.FILE_MODE, dir_fd=dir_fd)
    try:
        fsio.failpoint(f"{point}.write")
        fsio.write_all(fd, data)
        fsio.sync(fd, f"{point}.fsync")
    finally:
        os.close(fd)


def make_folder(dir_fd: int, name: str) -> int:
    """Create the folder `name` (0700) in a new tree, or open it if made already."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, DIR_MODE, dir_fd=dir_fd)
    return fsio.open_dir(name, dir_fd=dir_fd)


def refuse_existing(path: str, what: str) -> None:
    """StateError when `path` exists and is anything but an empty directory."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise StateError(f"cannot check {path}: {os_error_text(error)}") from None
    if not stat.S_ISDIR(info.st_mode) or os.listdir(path):
        raise StateError(f"{path} already exists; {what} is written only to a new directory")


def publish_directory(path: str, fill: Callable[[int], None], *, what: str, point: str) -> None:
    """Create the directory `path` whole: `fill(descriptor)` writes its contents.

    `what` names the contents in messages; `point` names the failpoints
    (`<point>.rename` just before the rename, and those of the files written).
    """
    destination = os.path.abspath(path.rstrip("/") or "/")
    refuse_existing(destination, what)
    parent, name = os.path.split(destination)
    temp = os.path.join(parent, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        create_private_directory(parent)
        os.mkdir(temp, DIR_MODE)
    except OSError as error:
        raise StateError(f"cannot create {temp}: {os_error_text(error)}") from None
    try:
        dir_fd = fsio.open_dir(temp)
        try:
            fill(dir_fd)
            fsio.fsync_dir(dir_fd, point)
        finally:
            os.close(dir_fd)
        fsio.failpoint(f"{point}.rename")
        os.rename(temp, destination)
        fsio.sync_dir_at(parent, point)
    except BaseException as error:
        shutil.rmtree(temp, ignore_errors=True)
        if isinstance(error, OSError):
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise StateError(
                    f"{destination} already exists; {what} is written only to a new directory"
                ) from None
            raise StateError(f"cannot write {destination}: {os_error_text(error)}") from None
        raise
