"""The workspace file tools `singularity_file_read` and `singularity_file_write` (spec §11.7-11.8).

Every path goes through `confinement`: the grammar first (no system call), then a
descriptor opened beneath the workspace root. Choices the spec leaves open:

- Argument checks (`invalid_arguments`) come before the path grammar (`invalid_path`).
- OS errors are reported as `<strerror> (os error N)`, without the file name (which may
  be a host path), in a form that passes the output boundary in both modes.
- A read refuses, as `path is not a bounded regular file`, anything that is not a
  regular file (FIFO, socket, device, directory), a file of more than 2 MiB, a file
  that grows past 2 MiB while it is read, and a file with more than one hard link
  (its other name may be outside the workspace).
- A write checks the boundary before creating any directory; missing parents are
  created with mode 0700 (each new entry synced in its parent) and the file is written
  with `fsio.replace_file` (temp `.singularity-<uuid>.tmp`, fsync, rename, directory
  fsync), so a new or replaced file has mode 0600. A destination that is a symlink or
  not a regular file is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Annotated

from singularity.secrets import os_error_text
from singularity.storage import fsio
from singularity.tools.arguments import Content, Text
from singularity.tools.base import FunctionTool, JsonObject, Outcome
from singularity.tools.confinement import (
    PATH_MESSAGE,
    InvalidPath,
    Workspace,
    WorkspaceEscape,
    parse_path,
)
from singularity.tools.typed import tool

READ_NAME = "singularity_file_read"
WRITE_NAME = "singularity_file_write"
READ_DESCRIPTION = "Read one UTF-8 file inside the configured workspace"
WRITE_DESCRIPTION = "Atomically create or replace one UTF-8 file inside the configured workspace"
MAX_PATH_BYTES = 4096
MAX_FILE_BYTES = 2 * 1024 * 1024
TEMP_PREFIX = ".singularity-"
FSIO_POINT = "workspace"
BOUNDARY_MESSAGE = "path leaves the workspace"
NOT_BOUNDED_MESSAGE = "path is not a bounded regular file"
DESTINATION_MESSAGE = "destination is not a regular file"
READ_CHUNK = 1 << 20


class NotBoundedRegularFile(Exception):
    """The opened file is not a regular file of at most the byte bound."""


def read_bounded(fd: int, limit: int = MAX_FILE_BYTES) -> bytes:
    """Every byte of an open regular, singly linked file of at most `limit` bytes."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1 or info.st_size > limit:
        raise NotBoundedRegularFile()
    chunks: list[bytes] = []
    total = 0
    # One byte past the bound is enough to know the file grew past it while we read.
    while total <= limit:
        chunk = os.read(fd, min(limit + 1 - total, READ_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise NotBoundedRegularFile()
    return b"".join(chunks)


PathText = Annotated[str, Text(MAX_PATH_BYTES)]


@tool(READ_NAME, READ_DESCRIPTION)
def read(workspace: Workspace, *, path: PathText) -> Outcome:
    """`singularity_file_read` on checked arguments."""
    try:
        parts = parse_path(path)
    except InvalidPath:
        return Outcome.failed("invalid_path", PATH_MESSAGE)
    try:
        fd = workspace.open_file(parts)
    except WorkspaceEscape:
        return Outcome.failed("workspace_boundary", BOUNDARY_MESSAGE)
    except OSError as error:
        # ENXIO: a Unix socket (or a device without a driver), never a regular file.
        if error.errno == errno.ENXIO:
            return Outcome.failed("file_read", NOT_BOUNDED_MESSAGE)
        return Outcome.failed("file_read", os_error_text(error))
    try:
        data = read_bounded(fd)
    except NotBoundedRegularFile:
        return Outcome.failed("file_read", NOT_BOUNDED_MESSAGE)
    except OSError as error:
        return Outcome.failed("file_read", os_error_text(error))
    finally:
        os.close(fd)
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return Outcome.failed("file_read", str(error))
    return Outcome.success({"content": content, "path": path})


@tool(WRITE_NAME, WRITE_DESCRIPTION)
def write(
    workspace: Workspace, *, path: PathText, content: Annotated[bytes, Content(MAX_FILE_BYTES)]
) -> Outcome:
    """`singularity_file_write` on checked arguments (`content` as UTF-8)."""
    try:
        parts = parse_path(path)
    except InvalidPath:
        return Outcome.failed("invalid_path", PATH_MESSAGE)
    try:
        dir_fd = workspace.open_dir(parts[:-1], create=True)
    except WorkspaceEscape:
        return Outcome.failed("workspace_boundary", BOUNDARY_MESSAGE)
    except OSError as error:
        return Outcome.failed("file_write", os_error_text(error))
    try:
        if not _replaceable(dir_fd, parts[-1]):
            return Outcome.failed("file_write", DESTINATION_MESSAGE)
        fsio.replace_file(dir_fd, parts[-1], content, temp_prefix=TEMP_PREFIX, point=FSIO_POINT)
    except OSError as error:
        return Outcome.failed("file_write", os_error_text(error))
    finally:
        os.close(dir_fd)
    return Outcome.success({"bytes": len(content), "path": path})


def _replaceable(dir_fd: int, name: str) -> bool:
    """Whether `name` is absent or a regular file (a symlink is never followed)."""
    info = fsio.entry_info(dir_fd, name)
    return info is None or stat.S_ISREG(info.st_mode)


def read_file(workspace: Workspace, arguments: JsonObject) -> Outcome:
    """Run `singularity_file_read` synchronously."""
    return read.outcome(workspace, arguments)


def write_file(workspace: Workspace, arguments: JsonObject) -> Outcome:
    """Run `singularity_file_write` synchronously."""
    return write.outcome(workspace, arguments)


def file_tools(workspace: Workspace) -> list[FunctionTool]:
    """The two file tools bound to `workspace`, in catalogue order (read, then write)."""
    return [read.bind_in_thread(workspace), write.bind_in_thread(workspace)]
