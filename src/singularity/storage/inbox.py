"""The operator inbox of a state directory: `inbox/`, one durable file per request.

Anyone who may write the state directory (the being's own runtime, `singularity say`, the
console) posts a request by creating one file, durably (temp file, fsync, hard link,
directory fsync), named `<nanoseconds>-<request id>.json` so the inbox reads in the order
requests were posted. Only the runtime that owns the being removes a file, after the
request's effect is durable; the activity journal, not the inbox, records what was applied.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass

from singularity.domain.operator import MAX_REQUEST_BYTES, OperatorRequest, decode_request
from singularity.errors import FatalIoError, SingularityError, StateError
from singularity.secrets import os_error_text
from singularity.storage import fsio

INBOX_DIR = "inbox"
TEMP_PREFIX = ".inbox-"
POINT = "inbox"
NAME_PATTERN = re.compile(
    r"^([0-9]{20})-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.json$"
)
STALE_TEMP_SECS = 600


@dataclass(frozen=True)
class Posted:
    """A request found in the inbox, or the reason its file could not be read."""

    name: str
    request: OperatorRequest | None
    error: str | None = None


def _open_inbox(state_dir_fd: int, *, create: bool) -> int | None:
    try:
        return fsio.open_dir(INBOX_DIR, dir_fd=state_dir_fd)
    except FileNotFoundError:
        if not create:
            return None
    try:
        os.mkdir(INBOX_DIR, 0o700, dir_fd=state_dir_fd)
    except FileExistsError:
        pass
    fsio.fsync_dir(state_dir_fd, POINT)
    fd = fsio.open_dir(INBOX_DIR, dir_fd=state_dir_fd)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        os.close(fd)
        raise StateError("the inbox belongs to another user")
    return fd


def file_name(request: OperatorRequest) -> str:
    """The name a request is posted under."""
    return f"{time.time_ns():020d}-{request.id}.json"


def post(state_dir_fd: int, request: OperatorRequest) -> str:
    """Durably add a request to the inbox; its file name."""
    try:
        inbox = _open_inbox(state_dir_fd, create=True)
        assert inbox is not None
        try:
            name = file_name(request)
            if not fsio.create_file(
                inbox, name, request.encode(), temp_prefix=TEMP_PREFIX, point=POINT
            ):
                raise StateError(f"operator request {request.id} is already in the inbox")
            return name
        finally:
            os.close(inbox)
    except OSError as error:
        raise FatalIoError(f"cannot write to the inbox: {os_error_text(error)}") from None


def post_at(state_dir: str, request: OperatorRequest) -> str:
    """Post to the inbox of the state directory at a path (it must already hold a being)."""
    try:
        fd = fsio.open_dir(state_dir)
    except OSError as error:
        raise StateError(
            f"cannot open state directory {state_dir}: {os_error_text(error)}"
        ) from None
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode) or os.fstat(fd).st_uid != os.geteuid():
            raise StateError(f"state directory {state_dir} is owned by another user")
        return post(fd, request)
    finally:
        os.close(fd)


def pending(state_dir_fd: int) -> list[Posted]:
    """Every request file in the inbox, oldest first; unreadable ones carry their error."""
    try:
        inbox = _open_inbox(state_dir_fd, create=False)
    except OSError as error:
        raise FatalIoError(f"cannot open the inbox: {os_error_text(error)}") from None
    if inbox is None:
        return []
    try:
        names = sorted(name for name in os.listdir(inbox) if NAME_PATTERN.fullmatch(name))
        found = []
        for name in names:
            try:
                data = fsio.read_at(inbox, name, MAX_REQUEST_BYTES + 1)
            except FileNotFoundError:
                continue  # applied and removed meanwhile
            except OSError as error:
                found.append(Posted(name, None, os_error_text(error)))
                continue
            try:
                request = decode_request(data)
            except SingularityError as error:
                found.append(Posted(name, None, str(error)))
                continue
            match = NAME_PATTERN.fullmatch(name)
            if match is None or match.group(2) != request.id:
                found.append(Posted(name, None, "file name does not match the request id"))
                continue
            found.append(Posted(name, request))
        return found
    finally:
        os.close(inbox)


def remove(state_dir_fd: int, names: list[str]) -> None:
    """Remove applied (or unreadable) request files, then sync the inbox once."""
    if not names:
        return
    try:
        inbox = _open_inbox(state_dir_fd, create=False)
        if inbox is None:
            return
        try:
            for name in names:
                try:
                    fsio.failpoint(f"{POINT}.unlink")
                    os.unlink(name, dir_fd=inbox)
                except FileNotFoundError:
                    pass
            fsio.fsync_dir(inbox, POINT)
        finally:
            os.close(inbox)
    except OSError as error:
        raise FatalIoError(f"cannot clean the inbox: {os_error_text(error)}") from None


def remove_stale_temps(state_dir_fd: int, now: float | None = None) -> int:
    """Remove temp files a crashed writer left (only ours, and only old ones)."""
    inbox = _open_inbox(state_dir_fd, create=False)
    if inbox is None:
        return 0
    moment = time.time() if now is None else now
    removed = 0
    try:
        for name in os.listdir(inbox):
            if not name.startswith(TEMP_PREFIX):
                continue
            info = os.stat(name, dir_fd=inbox, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and moment - info.st_mtime > STALE_TEMP_SECS:
                os.unlink(name, dir_fd=inbox)
                removed += 1
    finally:
        os.close(inbox)
    return removed
