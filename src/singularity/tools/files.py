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

import asyncio
import errno
import os
import stat
from typing import Any

from singularity.secrets import os_error_text
from singularity.storage import fsio
from singularity.tools.arguments import required_text
from singularity.tools.base import (
    FunctionTool,
    JsonObject,
    Outcome,
    ToolArgumentError,
    ToolDefinition,
    object_schema,
    string_properties,
)
from singularity.tools.confinement import (
    PATH_MESSAGE,
    InvalidPath,
    Workspace,
    WorkspaceEscape,
    parse_path,
)

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
CONTENT_MESSAGE = "content is invalid or too large"
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


def content_bytes(arguments: JsonObject) -> bytes:
    """The `content` argument as UTF-8: a string, untrimmed, no NUL, at most 2 MiB."""
    value = arguments.get("content")
    if not isinstance(value, str) or "\x00" in value:
        raise ToolArgumentError(CONTENT_MESSAGE)
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolArgumentError(CONTENT_MESSAGE) from None
    if len(data) > MAX_FILE_BYTES:
        raise ToolArgumentError(CONTENT_MESSAGE)
    return data


def read_file(workspace: Workspace, arguments: JsonObject) -> Outcome:
    """Run `singularity_file_read` synchronously."""
    try:
        text = required_text(arguments, "path", MAX_PATH_BYTES)
        parts = parse_path(text)
    except ToolArgumentError as error:
        return Outcome.failed(error.error_code, error.message)
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
    return Outcome.success({"content": content, "path": text})


def write_file(workspace: Workspace, arguments: JsonObject) -> Outcome:
    """Run `singularity_file_write` synchronously."""
    try:
        text = required_text(arguments, "path", MAX_PATH_BYTES)
        data = content_bytes(arguments)
        parts = parse_path(text)
    except ToolArgumentError as error:
        return Outcome.failed(error.error_code, error.message)
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
        fsio.replace_file(dir_fd, parts[-1], data, temp_prefix=TEMP_PREFIX, point=FSIO_POINT)
    except OSError as error:
        return Outcome.failed("file_write", os_error_text(error))
    finally:
        os.close(dir_fd)
    return Outcome.success({"bytes": len(data), "path": text})


def _replaceable(dir_fd: int, name: str) -> bool:
    """Whether `name` is absent or a regular file (a symlink is never followed)."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    return stat.S_ISREG(info.st_mode)


def file_tools(workspace: Workspace) -> list[FunctionTool]:
    """The two file tools bound to `workspace`, in catalogue order (read, then write)."""

    async def read(arguments: dict[str, Any]) -> Outcome:
        return await asyncio.to_thread(read_file, workspace, arguments)

    async def write(arguments: dict[str, Any]) -> Outcome:
        return await asyncio.to_thread(write_file, workspace, arguments)

    return [
        FunctionTool(
            ToolDefinition(READ_NAME, READ_DESCRIPTION, object_schema(string_properties("path"))),
            read,
        ),
        FunctionTool(
            ToolDefinition(
                WRITE_NAME, WRITE_DESCRIPTION, object_schema(string_properties("path", "content"))
            ),
            write,
        ),
    ]
