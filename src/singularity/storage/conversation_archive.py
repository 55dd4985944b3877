"""`conversation.jsonl`: messages that left the state's window, appended and fsynced (decision 8).

Each line is `{"seq": n, "message": {…}}`, where `n` counts from the being's first message.
The state records how many messages it archived; lines beyond that count are leftovers of a
crash between an archive append and the state save, and `repair` cuts them. The directory
store writes a living being's lines in batches (its log holds them meanwhile): the file
alone is current after a checkpoint (`singularity.store.directory`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from singularity.errors import FatalIoError, StateError
from singularity.jsoncodec import compact_utf8
from singularity.secrets import os_error_text
from singularity.storage import fsio

ARCHIVE_FILE = "conversation.jsonl"


def _read(dir_fd: int) -> bytes:
    try:
        return fsio.read_at(dir_fd, ARCHIVE_FILE, 1 << 40)
    except FileNotFoundError:
        return b""


def _change(dir_fd: int, verb: str, change: Callable[[int], None]) -> None:
    """Run `change` on the archive opened for appends; an OS error is fatal."""
    try:
        fd = fsio.open_append(dir_fd, ARCHIVE_FILE, "archive")
        try:
            change(fd)
        finally:
            os.close(fd)
    except OSError as error:
        raise FatalIoError(f"cannot {verb} {ARCHIVE_FILE}: {os_error_text(error)}") from None


def archived_count(dir_fd: int) -> int:
    """How many complete lines the archive holds."""
    return _read(dir_fd).count(b"\n")


def read_archive(dir_fd: int) -> list[dict[str, Any]]:
    """Every message the file holds, oldest first (see `singularity.store.directory` for
    when that is every archived message)."""
    return parse_lines(_read(dir_fd))


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    """The messages of archive lines."""
    return [json.loads(line)["message"] for line in data.splitlines() if line]


def encode_lines(first_seq: int, messages: Sequence[Any]) -> bytes:
    """The archive's lines of these messages, numbered from `first_seq`."""
    return encoded_lines(first_seq, [compact_utf8(message) for message in messages])


def encoded_lines(first_seq: int, messages: Sequence[bytes]) -> bytes:
    """`encode_lines` of messages given as their compact UTF-8 JSON."""
    return b"".join(line_parts(first_seq, messages))


def line_parts(first_seq: int, messages: Sequence[bytes]) -> list[bytes]:
    """The pieces that joined make `encoded_lines`: each message as it is given, between
    its line's head and end, so that holding lines to write later copies no message."""
    if len(messages) == 1:  # the usual step of a full window
        return [b'{"seq":%d,"message":' % first_seq, messages[0], b"}\n"]
    parts: list[bytes] = []
    for offset, message in enumerate(messages):
        parts += (b'{"seq":%d,"message":' % (first_seq + offset), message, b"}\n")
    return parts


LINE_EXTRA = len(b'{"seq":,"message":}\n')
"""The bytes a line adds to its message, besides the digits of its number."""


def lines_size(first_seq: int, messages: Sequence[bytes]) -> int:
    """`len(encoded_lines(first_seq, messages))`, without building them."""
    if len(messages) == 1:  # the usual step of a full window
        return len(messages[0]) + LINE_EXTRA + len(b"%d" % first_seq)
    return sum(
        len(message) + LINE_EXTRA + len(b"%d" % (first_seq + offset))
        for offset, message in enumerate(messages)
    )


def append(dir_fd: int, first_seq: int, messages: Sequence[dict[str, Any]]) -> None:
    """Append messages numbered from `first_seq` and fsync them."""
    data = encode_lines(first_seq, messages)
    _change(dir_fd, "append to", lambda fd: fsio.append_durably(fd, data, "archive"))


def repair(dir_fd: int, expected: int) -> int:
    """Cut lines beyond the `expected` count (and a torn tail); returns the bytes removed."""
    data = _read(dir_fd)
    lines = data.split(b"\n")
    complete = len(lines) - 1
    if complete < expected:
        raise StateError(
            f"{ARCHIVE_FILE} holds {complete} messages but the state archived {expected}"
        )
    keep = sum(len(line) + 1 for line in lines[:expected])
    if keep == len(data):
        return 0
    _change(dir_fd, "repair", lambda fd: fsio.truncate_durably(fd, keep, "archive"))
    return len(data) - keep
