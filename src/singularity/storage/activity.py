"""`activity.jsonl`: the append-only, fsynced journal of everything a being did (spec §5.5).

One compact JSON object per line, `type` first, then the event's fields in the
spec's order. At open, a torn last line is cut off (and reported); a malformed line
followed by good ones is corruption, and opening refuses (decision 13).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from singularity.errors import StateError
from singularity.jsoncodec import compact_utf8
from singularity.storage import fsio

ACTIVITY_FILE = "activity.jsonl"
Event = dict[str, Any]


@dataclass(frozen=True)
class Scan:
    """What a read of the journal found: its events and the byte length of the good prefix."""

    events: list[Event]
    good_length: int
    torn_bytes: int


def scan(data: bytes) -> Scan:
    """Parse journal bytes; a bad line followed by good ones raises StateError."""
    events: list[Event] = []
    offset = 0
    lines = data.split(b"\n")
    for index, line in enumerate(lines):
        is_last = index == len(lines) - 1
        if is_last and not line:
            break
        event = _parse_line(line) if not is_last else None
        if event is None:
            if is_last or all(not rest.strip() for rest in lines[index + 1 :]):
                return Scan(events, offset, len(data) - offset)
            raise StateError(f"activity.jsonl is corrupt at line {index + 1}")
        events.append(event)
        offset += len(line) + 1
    return Scan(events, offset, 0)


def _parse_line(line: bytes) -> Event | None:
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return None
    return event


def encode_lines(events: Iterable[Event]) -> bytes:
    """The journal's lines of these events: compact JSON, one a line."""
    encoded = b"\n".join(map(compact_utf8, events))
    return encoded + b"\n" if encoded else b""


def read_events(dir_fd: int) -> list[Event]:
    """Every complete event in the journal (read-only; a torn tail is ignored)."""
    try:
        data = fsio.read_at(dir_fd, ACTIVITY_FILE, 1 << 40)
    except FileNotFoundError:
        return []
    return scan(data).events


def read_from(dir_fd: int, offset: int) -> tuple[list[Event], int]:
    """The complete events after byte `offset`, and the offset after the last of them."""
    try:
        fd = os.open(ACTIVITY_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return [], 0
    try:
        size = os.fstat(fd).st_size
        if size < offset:
            offset = 0  # cut back by a repair at boot: read it again
        data = os.pread(fd, size - offset, offset) if size > offset else b""
    finally:
        os.close(fd)
    end = data.rfind(b"\n") + 1
    found = []
    for line in data[:end].split(b"\n"):
        event = _parse_line(line) if line else None
        if event is not None:
            found.append(event)
    return found, offset + end
