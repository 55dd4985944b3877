"""`state.redo`: the fsynced log of the steps a being took since `state.json` was written.

The file starts with a header naming the checkpoint it continues, the SHA-256 of the
`state.json` bytes it applies to (`none` before the first). Each record is one step:

    R <seq> <activity offset> <activity length> <changes length> <crc32>\\n
    <the step's activity.jsonl lines><the step's changes, compact JSON>\\n

`seq` counts from 1 after each checkpoint; the CRC-32 covers the two bodies. A record is
appended and fdatasynced in one call: that is the step's only sync. A record cut short at
the end of the file is a step that never became durable, and is ignored (and cut by the
next checkpoint); a damaged record followed by more data is corruption.
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from dataclasses import dataclass

from singularity.errors import FatalIoError
from singularity.secrets import os_error_text
from singularity.storage import fsio

REDO_FILE = "state.redo"
REDO_TEMP_PREFIX = ".redo-"
MAGIC = b"singularity-redo-v1 "
NO_CHECKPOINT = "none"
_HEADER = re.compile(rb"singularity-redo-v1 (none|[0-9a-f]{64})\n")
_RECORD = re.compile(rb"R ([0-9]{1,19}) ([0-9]{1,19}) ([0-9]{1,19}) ([0-9]{1,19}) ([0-9a-f]{8})\n")
MAX_RECORD_HEAD = 128


class RedoCorrupt(ValueError):
    """The log cannot be read as this format."""


def checkpoint_id(state_bytes: bytes | None) -> str:
    """The name a log gives the `state.json` it continues: its SHA-256, or `none`."""
    return NO_CHECKPOINT if state_bytes is None else hashlib.sha256(state_bytes).hexdigest()


@dataclass(frozen=True)
class Record:
    """One logged step."""

    seq: int
    activity_at: int
    activity: bytes
    changes: bytes
    end: int
    """The byte offset just after the record in the log."""

    @property
    def activity_end(self) -> int:
        """The length of `activity.jsonl` once this step's lines are in it."""
        return self.activity_at + len(self.activity)


@dataclass(frozen=True)
class Scan:
    """What a read of the log found."""

    base: str
    records: list[Record]
    good_length: int
    torn_bytes: int


def encode_record(seq: int, activity_at: int, activity: bytes, changes: bytes) -> bytes:
    """The bytes of one record."""
    crc = zlib.crc32(changes, zlib.crc32(activity))
    head = b"R %d %d %d %d %08x\n" % (seq, activity_at, len(activity), len(changes), crc)
    return b"".join((head, activity, changes, b"\n"))


def header(base: str) -> bytes:
    """The first line of a log continuing the checkpoint `base`."""
    return MAGIC + base.encode("ascii") + b"\n"


def scan(data: bytes) -> Scan:
    """Parse a whole log; RedoCorrupt when its header or a record followed by more is bad."""
    found = _HEADER.match(data)
    if found is None:
        raise RedoCorrupt("state.redo does not start with a redo log header")
    base = found.group(1).decode("ascii")
    offset = found.end()
    records: list[Record] = []
    while offset < len(data):
        record = _record_at(data, offset, len(records) + 1)
        if record is None:
            return Scan(base, records, offset, len(data) - offset)
        records.append(record)
        offset = record.end
    return Scan(base, records, offset, 0)


def _record_at(data: bytes, offset: int, seq: int) -> Record | None:
    """The record at `offset`; None when it is cut short at the end of the data."""
    newline = data.find(b"\n", offset, offset + MAX_RECORD_HEAD)
    if newline < 0:
        if len(data) - offset < MAX_RECORD_HEAD and b"\n" not in data[offset:]:
            return None
        raise RedoCorrupt(f"state.redo has a damaged record at byte {offset}")
    head = _RECORD.fullmatch(data, offset, newline + 1)
    if head is None:
        _torn_or_corrupt(data, newline + 1, offset)
        return None
    number, activity_at, activity_length, changes_length = (int(head.group(i)) for i in range(1, 5))
    start = newline + 1
    middle = start + activity_length
    end = middle + changes_length + 1
    if end > len(data):
        return None
    activity, changes = data[start:middle], data[middle : end - 1]
    crc = zlib.crc32(changes, zlib.crc32(activity))
    if data[end - 1 : end] != b"\n" or crc != int(head.group(5), 16):
        _torn_or_corrupt(data, end, offset)
        return None
    if number != seq:
        raise RedoCorrupt(f"state.redo record {number} at byte {offset} follows record {seq - 1}")
    return Record(number, activity_at, activity, changes, end)


def _torn_or_corrupt(data: bytes, after: int, offset: int) -> None:
    """Accept a damaged last record (the crash that cut it); refuse one followed by more."""
    if after < len(data):
        raise RedoCorrupt(f"state.redo has a damaged record at byte {offset}")


class RedoLog:
    """The open log of one state directory, appended to durably."""

    def __init__(self, dir_fd: int, fd: int, base: str, size: int, seq: int) -> None:
        self._dir_fd = dir_fd
        self._fd = fd
        self.base = base
        self.size = size
        self.seq = seq

    @classmethod
    def start(cls, dir_fd: int, base: str) -> RedoLog:
        """Durably replace the log with an empty one continuing the checkpoint `base`."""
        data = header(base)
        try:
            fsio.replace_file(
                dir_fd, REDO_FILE, data, temp_prefix=REDO_TEMP_PREFIX, point="redo-start"
            )
            fd = fsio.open_append(dir_fd, REDO_FILE, "redo-start")
        except OSError as error:
            raise FatalIoError(f"cannot start {REDO_FILE}: {os_error_text(error)}") from None
        return cls(dir_fd, fd, base, len(data), 0)

    def append(self, activity_at: int, activity: bytes, changes: bytes) -> None:
        """Append one step and fdatasync it: the step is durable when this returns."""
        record = encode_record(self.seq + 1, activity_at, activity, changes)
        try:
            fsio.append_durably(self._fd, record, "redo")
        except OSError as error:
            raise FatalIoError(f"cannot append to {REDO_FILE}: {os_error_text(error)}") from None
        self.seq += 1
        self.size += len(record)

    def close(self) -> None:
        """Close the log."""
        os.close(self._fd)


def read_log(dir_fd: int) -> bytes | None:
    """The log's bytes, None when there is none."""
    try:
        return fsio.read_at(dir_fd, REDO_FILE, 1 << 40)
    except FileNotFoundError:
        return None
