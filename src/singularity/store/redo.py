"""`state.redo`: the fsynced log of the steps a being took since `state.json` was written.

The file starts with a header naming the checkpoint it continues, the SHA-256 of the
`state.json` bytes it applies to (`none` before the first). Each record is one step:

    R <seq> <activity offset> <activity length> <changes length> <crc32>\\n
    <the step's activity.jsonl lines><the step's changes, compact JSON>\\n

A step that adds to a sanctum file (the runtime's session note) carries the append in a
record of its own, written just before the step's record, in the same write:

    N <seq> <file offset> <root length> <path length> <data length> <crc32>\n
    <the sanctum folder><the file's path beneath it><the appended bytes>\n

`seq` counts every record from 1 after each checkpoint; the CRC-32 covers the bodies. The
records of a step are appended and fdatasynced in one call: that is the step's only sync.
A record cut short at the end of the file is a step that never became durable, and is
ignored (and cut by the next checkpoint); a damaged record followed by more data is
corruption. An append whose step record was cut short is still replayed: a session note
written before its event is journaled is found by the rerun that journals it.
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from singularity.errors import FatalIoError
from singularity.sanctum.logged import LoggedAppend
from singularity.secrets import os_error_text
from singularity.storage import fsio

REDO_FILE = "state.redo"
REDO_TEMP_PREFIX = ".redo-"
MAGIC = b"singularity-redo-v1 "
NO_CHECKPOINT = "none"
_HEADER = re.compile(rb"singularity-redo-v1 (none|[0-9a-f]{64})\n")
_RECORD = re.compile(rb"R ([0-9]{1,19}) ([0-9]{1,19}) ([0-9]{1,19}) ([0-9]{1,19}) ([0-9a-f]{8})\n")
_APPEND = re.compile(
    rb"N ([0-9]{1,19}) ([0-9]{1,19}) ([0-9]{1,19}) ([0-9]{1,19}) ([0-9]{1,19}) ([0-9a-f]{8})\n"
)
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
    appends: list[LoggedAppend]
    """The sanctum appends the log carries, in order."""


def encode_record(seq: int, activity_at: int, activity: bytes, changes: bytes) -> bytes:
    """The bytes of one record."""
    crc = zlib.crc32(changes, zlib.crc32(activity))
    head = b"R %d %d %d %d %08x\n" % (seq, activity_at, len(activity), len(changes), crc)
    return b"".join((head, activity, changes, b"\n"))


def encode_append(seq: int, append: LoggedAppend) -> bytes:
    """The bytes of one sanctum append's record."""
    root, path = os.fsencode(append.root), os.fsencode(append.path)
    crc = zlib.crc32(append.data, zlib.crc32(path, zlib.crc32(root)))
    lengths = (len(root), len(path), len(append.data))
    head = b"N %d %d %d %d %d %08x\n" % (seq, append.offset, *lengths, crc)
    return b"".join((head, root, path, append.data, b"\n"))


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
    appends: list[LoggedAppend] = []
    seq = 0
    while offset < len(data):
        found_at = _append_at if data.startswith(b"N ", offset) else _record_at
        record = found_at(data, offset, seq + 1)
        if record is None:
            return Scan(base, records, offset, len(data) - offset, appends)
        seq += 1
        found_record, offset = record
        if isinstance(found_record, Record):
            records.append(found_record)
        else:
            appends.append(found_record)
    return Scan(base, records, offset, 0, appends)


def _head_end(data: bytes, offset: int) -> int | None:
    """Where the head line of the record at `offset` ends; None when it is cut short."""
    newline = data.find(b"\n", offset, offset + MAX_RECORD_HEAD)
    if newline < 0:
        if len(data) - offset < MAX_RECORD_HEAD and b"\n" not in data[offset:]:
            return None
        raise RedoCorrupt(f"state.redo has a damaged record at byte {offset}")
    return newline + 1


def _append_at(data: bytes, offset: int, seq: int) -> tuple[LoggedAppend, int] | None:
    """The sanctum append at `offset` and the offset after it; None when cut short."""
    start = _head_end(data, offset)
    if start is None:
        return None
    head = _APPEND.fullmatch(data, offset, start)
    if head is None:
        _torn_or_corrupt(data, start, offset)
        return None
    number, at, *lengths = (int(head.group(i)) for i in range(1, 6))
    cuts = [start]
    for length in lengths:
        cuts.append(cuts[-1] + length)
    end = cuts[-1] + 1
    if end > len(data):
        return None
    root, path, body = (data[cuts[i] : cuts[i + 1]] for i in range(3))
    crc = zlib.crc32(body, zlib.crc32(path, zlib.crc32(root)))
    if data[end - 1 : end] != b"\n" or crc != int(head.group(6), 16):
        _torn_or_corrupt(data, end, offset)
        return None
    _check_seq(number, seq, offset)
    return LoggedAppend(os.fsdecode(root), os.fsdecode(path), at, body), end


def _check_seq(number: int, seq: int, offset: int) -> None:
    if number != seq:
        raise RedoCorrupt(f"state.redo record {number} at byte {offset} follows record {seq - 1}")


def _record_at(data: bytes, offset: int, seq: int) -> tuple[Record, int] | None:
    """The step record at `offset` and the offset after it; None when it is cut short."""
    newline = _head_end(data, offset)
    if newline is None:
        return None
    newline -= 1
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
    _check_seq(number, seq, offset)
    return Record(number, activity_at, activity, changes, end), end


def _torn_or_corrupt(data: bytes, after: int, offset: int) -> None:
    """Accept a damaged last record (the crash that cut it); refuse one followed by more."""
    if after < len(data):
        raise RedoCorrupt(f"state.redo has a damaged record at byte {offset}")


@dataclass(slots=True)  # not frozen, which costs a call a field to build: never changed
class Entry:
    """A step's records as they are appended to the log."""

    data: bytes
    records: int


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

    def encode(
        self,
        activity_at: int,
        activity: bytes,
        changes: bytes,
        appends: Sequence[LoggedAppend] = (),
    ) -> Entry:
        """The next step's records (its sanctum appends first), built but not written."""
        if not appends:  # the usual step: one record
            return Entry(encode_record(self.seq + 1, activity_at, activity, changes), 1)
        parts = [encode_append(self.seq + 1 + index, each) for index, each in enumerate(appends)]
        parts.append(encode_record(self.seq + 1 + len(appends), activity_at, activity, changes))
        return Entry(b"".join(parts), len(parts))

    def append(self, entry: Entry) -> None:
        """Write the step `encode` built and fdatasync it: the step is durable when this
        returns. Nothing else is done between the two system calls."""
        try:
            fsio.append_durably(self._fd, entry.data, "redo")
        except OSError as error:
            raise FatalIoError(f"cannot append to {REDO_FILE}: {os_error_text(error)}") from None
        self.seq += entry.records
        self.size += len(entry.data)

    def close(self) -> None:
        """Close the log."""
        os.close(self._fd)


def read_log(dir_fd: int) -> bytes | None:
    """The log's bytes, None when there is none."""
    try:
        return fsio.read_at(dir_fd, REDO_FILE, 1 << 40)
    except FileNotFoundError:
        return None
