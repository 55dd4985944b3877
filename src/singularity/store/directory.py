"""The directory backend: `state.json` checkpoints and the `state.redo` log of each step.

A step costs one append and one fdatasync, of what it changed: its record to `state.redo`,
then its lines to `activity.jsonl`, not synced, since the log holds them; nor is a session
note riding in the step (`ride`, `singularity.store.sanctum_appends`), written to its
sanctum file after the record. The archive lines of the messages leaving the window are
held back (the log holds them too) and written, before a later record, once they make
`archive_batch` bytes, and at every checkpoint: lines beyond the state's count are what a
crash leaves, cut at boot. A checkpoint (at a clean stop, past a size or count threshold,
and at boot after a replay) syncs those files, writes `state.json` whole (temp, fsync,
rename, directory fsync) and starts an empty log naming it. Boot replays the log onto the
checkpoint and writes back whatever of those files a crash lost.

`state.json` and `conversation.jsonl` alone are current after every checkpoint:
`singularity checkpoint`, any clean stop, any boot. Between them, the current state is
`state.json` plus `state.redo`, which `peek_state` (and `verify`, `show`, the console)
replays without changing anything, and the archive is `conversation.jsonl` plus the
messages the replayed steps archived (`Replay.archived`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from singularity.domain.records import ChatMessage, JsonNumber
from singularity.domain.state import AgentState, parse_state
from singularity.errors import FatalIoError, JsonFailure, StateError
from singularity.jsoncodec import loads_strict
from singularity.sanctum.logged import LoggedAppend
from singularity.secrets import os_error_text
from singularity.storage import activity as activity_file
from singularity.storage import conversation_archive, fsio
from singularity.storage.activity import ACTIVITY_FILE
from singularity.storage.conversation_archive import ARCHIVE_FILE
from singularity.storage.statedir import MAX_STATE_BYTES, STATE_FILE, StateDir
from singularity.store import redo
from singularity.store.base import Event, state_of
from singularity.store.changes import Changes, Tracker, apply_changes
from singularity.store.sanctum_appends import SanctumAppends, check_appends

log = logging.getLogger(__name__)
CHECKPOINT_BYTES = 16 << 20
"""A log longer than this and than twice `state.json` is checkpointed."""
CHECKPOINT_RECORDS = 100_000
ARCHIVE_BATCH = 64 << 10
"""Archive lines held back (the log holds them) until they are this many bytes."""
_POINTS = {ACTIVITY_FILE: "activity", ARCHIVE_FILE: "archive"}
"""The failpoint names of the files a step writes after its record."""
_WRITE_POINTS = {name: f"{point}.write" for name, point in _POINTS.items()}


@dataclass
class Replay:
    """A checkpoint with its log replayed onto it, in memory."""

    state_bytes: bytes | None
    state: AgentState | None
    records: list[redo.Record] = field(default_factory=list)
    archived: dict[int, Any] = field(default_factory=dict)
    """Messages the replayed steps moved out of the window, by their index."""
    stale_log: bool = False
    torn_log_bytes: int = 0
    appends: list[LoggedAppend] = field(default_factory=list)
    """The sanctum appends the replayed log carries."""


def _read_optional(dir_fd: int, name: str, limit: int) -> bytes | None:
    try:
        return fsio.read_at(dir_fd, name, limit)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise FatalIoError(f"cannot read {name}: {os_error_text(error)}") from None


def replay(dir_fd: int) -> Replay:
    """The current state of a directory: `state.json` with `state.redo` replayed (read-only).

    The log is read before the checkpoint: a checkpoint written between the two reads
    makes the log stale, and the newer `state.json` is then current by itself.
    """
    log_bytes = _read_optional(dir_fd, redo.REDO_FILE, 1 << 40)
    state_bytes = _read_optional(dir_fd, STATE_FILE, MAX_STATE_BYTES)
    state = parse_state(state_bytes) if state_bytes is not None else None
    found = Replay(state_bytes, state)
    if log_bytes is None:
        return found
    try:
        scanned = redo.scan(log_bytes)
    except redo.RedoCorrupt as error:
        raise StateError(str(error)) from None
    found.torn_log_bytes = scanned.torn_bytes
    if scanned.base != redo.checkpoint_id(state_bytes):  # its appends were synced then
        # An empty log naming another state.json is what a clean stop leaves before
        # state.json is edited by hand: nothing in it is lost, nothing to report.
        found.stale_log = bool(scanned.records)
        return found
    found.appends = scanned.appends
    if not scanned.records:
        return found
    if state_bytes is None:
        raise StateError("state.redo holds steps but there is no state.json")
    document = loads_strict(state_bytes, parse_float=JsonNumber)
    for record in scanned.records:
        try:
            changes = Changes.from_json(json.loads(record.changes))
            before = int(document.get("mind", {}).get("conversation_archived", 0))
            moved = apply_changes(document, changes)
        except ValueError as error:
            raise StateError(f"state.redo record {record.seq} does not apply: {error}") from None
        found.archived.update((before + index, message) for index, message in enumerate(moved))
    found.records = scanned.records
    found.state = state_of(document, "state.json with state.redo replayed")
    return found


def check_log(dir_fd: int, state_dir: str, *, alive: bool) -> tuple[list[str], list[str]]:
    """What `verify` finds in `state.redo`: problems, and warnings (read-only).

    A log that does not apply, a damaged record, or activity lines or a sanctum file that
    differ from the logged ones are problems. A torn last record, or activity lines and
    session notes still to be written back, are what a boot repairs: problems of a
    stopped being, warnings beside a living one.
    """
    problems: list[str] = []
    settling: list[str] = []
    try:
        found = replay(dir_fd)
    except (StateError, JsonFailure) as error:
        return [str(error)], []
    if found.torn_log_bytes:
        settling.append(f"state.redo ends with a torn record of {found.torn_log_bytes} bytes")
    if found.stale_log:
        settling.append("state.redo continues an older state.json (the next boot drops it)")
    if found.records:
        start = found.records[0].activity_at
        expected = b"".join(record.activity for record in found.records)
        data = _read_optional(dir_fd, ACTIVITY_FILE, 1 << 40) or b""
        held = data[start : start + len(expected)]
        if len(data) < start or not expected.startswith(held):
            problems.append("activity.jsonl differs from the lines state.redo logged")
        elif len(held) < len(expected):
            settling.append(
                f"activity.jsonl lacks {len(expected) - len(held)} logged bytes "
                "(the next boot writes them back)"
            )
    in_sanctum, to_write = check_appends(state_dir, found.appends)
    problems += in_sanctum
    settling += to_write
    return (problems, settling) if alive else (problems + settling, [])


def peek_state(path: str) -> AgentState | None:
    """A being's current state without locking or changing anything; None when there is none."""
    try:
        dir_fd = fsio.open_dir(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise StateError(f"cannot open state directory {path}: {os_error_text(error)}") from None
    try:
        return replay(dir_fd).state
    finally:
        os.close(dir_fd)


class DirectoryStore:
    """A being in a locked state directory."""

    def __init__(
        self,
        statedir: StateDir,
        *,
        checkpoint_bytes: int = CHECKPOINT_BYTES,
        checkpoint_records: int = CHECKPOINT_RECORDS,
        archive_batch: int = ARCHIVE_BATCH,
    ) -> None:
        self.statedir = statedir
        self.archive_batch = archive_batch
        self.checkpoint_bytes = checkpoint_bytes
        self.checkpoint_records = checkpoint_records
        self.tracker = Tracker(archives=True)
        self.events_at_open: list[Event] = []
        """The activity journal as `load` found it, and what this store appended since."""
        self._log: redo.RedoLog | None = None
        self._activity_fd: int | None = None
        self._archive_fd: int | None = None
        self._archive_held: list[bytes] = []
        """The messages of the archive lines of logged steps not yet written, as their steps
        logged them, numbered from `_archive_first`: a step makes no write of its own to the
        archive; a batch of them, or the checkpoint, writes their lines."""
        self._archive_first = 0
        self._archive_held_size = 0
        """The bytes of the held messages' lines."""
        self._activity_size = 0
        self._checkpoint_size = checkpoint_bytes
        """A log longer than this is checkpointed: `checkpoint_bytes`, or twice `state.json`."""
        self.appends = SanctumAppends(statedir.path)
        self.broken = False

    @classmethod
    def open(cls, path: str, *, create: bool = True, **limits: int) -> DirectoryStore:
        """Open and lock the state directory (created 0700 if allowed); nothing is read yet."""
        return cls(StateDir.open(path, create=create), **limits)

    @property
    def label(self) -> str:
        return f"state directory {self.statedir.path}"

    # Recovery.

    def load(self) -> AgentState | None:
        """Replay the log, write back what a crash lost, checkpoint if anything was replayed."""
        fd = self.statedir.fd
        found = replay(fd)
        self._activity_fd = self._open_append(ACTIVITY_FILE, "activity")
        repaired = self._repair_activity(found.records)
        if found.state is not None:
            archived = found.state.mind.conversation_archived
            self._repair_archive(archived, found.archived)
        if found.stale_log:
            log.warning("state.redo continues an older state.json (a checkpoint was cut short)")
        if found.torn_log_bytes:
            log.warning("cut a torn record of %d bytes from state.redo", found.torn_log_bytes)
        if repaired:
            log.warning("wrote back %d bytes of activity.jsonl from state.redo", repaired)
        state = found.state
        if state is None:
            return None
        self._checkpoint_size = max(self.checkpoint_bytes, 2 * len(found.state_bytes or b""))
        self.appends.logged = list(found.appends)  # written back by the checkpoint
        if found.records or found.appends or found.stale_log or found.torn_log_bytes or repaired:
            self.checkpoint(state)
        else:
            self._log = redo.RedoLog.start(fd, redo.checkpoint_id(found.state_bytes))
            self.tracker.reset(state)
        return state

    def _open_append(self, name: str, point: str) -> int:
        try:
            fd = fsio.open_append(self.statedir.fd, name, point)
            os.fchmod(fd, 0o600)
            return fd
        except OSError as error:
            raise FatalIoError(f"cannot open {name}: {os_error_text(error)}") from None

    def _repair_activity(self, records: Sequence[redo.Record]) -> int:
        """Make `activity.jsonl` hold exactly the logged steps' lines after the checkpoint's.

        Returns how many bytes were written back. Without a log, a torn last line is cut
        and a malformed line followed by good ones refuses the boot, as always.
        """
        assert self._activity_fd is not None
        data = _read_optional(self.statedir.fd, ACTIVITY_FILE, 1 << 40) or b""
        if not records:
            scanned = activity_file.scan(data)
            if scanned.torn_bytes:
                log.warning(
                    "cut a torn last line of %d bytes from activity.jsonl", scanned.torn_bytes
                )
                self._truncate(self._activity_fd, scanned.good_length, "activity")
            self.events_at_open = scanned.events
            self._activity_size = scanned.good_length
            return 0
        start = records[0].activity_at
        expected = b"".join(record.activity for record in records)
        if len(data) < start:
            raise StateError(
                f"activity.jsonl holds {len(data)} bytes but state.redo continues it at {start}"
            )
        written = 0
        if data[start:] != expected:
            self._truncate(self._activity_fd, start, "activity")
            self._append_synced(self._activity_fd, expected, "activity")
            written = len(expected)
            data = data[:start] + expected
        self.events_at_open = activity_file.scan(data).events
        self._activity_size = len(data)
        return written

    def _repair_archive(self, expected: int, moved: dict[int, Any]) -> None:
        """Make `conversation.jsonl` hold exactly the `expected` archived messages."""
        held = conversation_archive.archived_count(self.statedir.fd)
        if held < expected:
            missing = range(held, expected)
            if any(index not in moved for index in missing):
                raise StateError(
                    f"{ARCHIVE_FILE} holds {held} messages but the state archived {expected}"
                )
            conversation_archive.append(self.statedir.fd, held, [moved[i] for i in missing])
        else:
            conversation_archive.repair(self.statedir.fd, expected)

    def _truncate(self, fd: int, length: int, point: str) -> None:
        try:
            fsio.truncate_durably(fd, length, point)
        except OSError as error:
            raise FatalIoError(f"cannot repair {point}: {os_error_text(error)}") from None

    def _append_synced(self, fd: int, data: bytes, point: str) -> None:
        try:
            fsio.append_durably(fd, data, point)
        except OSError as error:
            raise FatalIoError(f"cannot write {point}: {os_error_text(error)}") from None

    # Steps.

    def ride(self, append: LoggedAppend) -> None:
        """Log a sanctum append in the next step's record; write it once that is durable."""
        self.appends.ride(append)

    def commit(self, state: AgentState, events: Sequence[Event]) -> None:
        if self.broken:
            raise FatalIoError(f"the {self.label} failed earlier; it is not written again")
        lines = activity_file.encode_lines(events)
        try:
            if self._log is None:
                self._first_commit(state, lines)
            else:
                self._logged_commit(state, lines)
        except BaseException:
            self.broken = True
            raise
        self.events_at_open.extend(events)

    def _first_commit(self, state: AgentState, lines: bytes) -> None:
        """A new being: its first events and its first checkpoint."""
        assert self._activity_fd is not None
        if lines:
            self._append_synced(self._activity_fd, lines, "activity")
            self._activity_size += len(lines)
        self.checkpoint(state)

    def _logged_commit(self, state: AgentState, lines: bytes) -> None:
        """Everything but the activity lines is done before the record's sync, so that the
        step does as little as it can once the sync returns (with caches gone cold)."""
        assert self._log is not None and self._activity_fd is not None
        changes = self.tracker.diff(state)
        if not changes and not lines and not self.appends.riding:
            return
        leaving = changes.archived()
        if leaving and changes.fields.get("mind.conversation_archived") is None:
            raise StateError("messages left the conversation window without being archived")
        # The leaving messages as their step logged them, encoded once.
        moved = self.tracker.dropped_encoded(leaving)
        riding = self.appends.take() if self.appends.riding else []
        entry = self._log.encode(self._activity_size, lines, self.tracker.encode(changes), riding)
        if moved:
            self._hold_archive(state.mind.conversation_archived - leaving, moved)
            if self._archive_held_size >= self.archive_batch:
                self._write_archive()
        # A failed sync breaks the store, so the image may be taken before it.
        self.tracker.take(state, changes)
        self._log.append(entry)
        if riding:
            self.appends.write(riding)
        if lines:
            self._write(self._activity_fd, lines, ACTIVITY_FILE)
            self._activity_size += len(lines)
        if self._log.seq >= self.checkpoint_records or self._log.size > self._checkpoint_size:
            self.checkpoint(state)

    def _hold_archive(self, first: int, moved: list[bytes]) -> None:
        """Hold the lines of `moved`, numbered from `first`, to write with the batch; only
        their size is counted now, and their lines are built when the batch is written."""
        held = self._archive_held
        if not held:
            self._archive_first = first
        elif first != self._archive_first + len(held):  # never: archived messages follow
            self._write_archive()
            self._archive_first = first
        held += moved
        self._archive_held_size += conversation_archive.lines_size(first, moved)

    def _write_archive(self) -> None:
        """Write the held archive lines, before any later record: lines beyond the state's
        count are what a crash leaves, and a boot cuts them (`conversation_archive.repair`)."""
        if not self._archive_held:
            return
        if self._archive_fd is None:
            self._archive_fd = self._open_append(ARCHIVE_FILE, "archive")
        lines = conversation_archive.encoded_lines(self._archive_first, self._archive_held)
        self._write(self._archive_fd, lines, ARCHIVE_FILE)
        self._archive_held.clear()
        self._archive_held_size = 0

    def _write(self, fd: int, data: bytes, name: str) -> None:
        """Write without a sync: the redo record already holds these bytes."""
        if not data:
            return
        try:
            fsio.failpoint(_WRITE_POINTS[name])
            fsio.write_all(fd, data)
        except OSError as error:
            raise FatalIoError(f"cannot append to {name}: {os_error_text(error)}") from None

    def checkpoint(self, state: AgentState) -> None:
        """Sync the journal and the archive, write `state.json` whole, start an empty log.

        A failure leaves the store broken: nothing is written again.
        """
        if self.broken:
            raise FatalIoError(f"the {self.label} failed earlier; it is not written again")
        try:
            self._checkpoint(state)
        except BaseException:
            self.broken = True
            raise

    def _checkpoint(self, state: AgentState) -> None:
        data = state.to_json()
        base = redo.checkpoint_id(data)
        self._write_archive()
        for fd, name in ((self._activity_fd, ACTIVITY_FILE), (self._archive_fd, ARCHIVE_FILE)):
            if fd is None:
                continue
            try:
                fsio.sync(fd, f"{_POINTS[name]}.fsync", data_only=True)
            except OSError as error:
                raise FatalIoError(f"cannot sync {name}: {os_error_text(error)}") from None
        self.appends.settle()
        if self._log is None or self._log.base != base:
            self.statedir.write_state_bytes(data)
        if self._log is not None:
            self._log.close()
            self._log = None
        self._log = redo.RedoLog.start(self.statedir.fd, base)
        self._checkpoint_size = max(self.checkpoint_bytes, 2 * len(data))
        self.tracker.reset(state)

    # Reading.

    def archived(self, start: int = 0, stop: int | None = None) -> list[ChatMessage]:
        messages = conversation_archive.read_archive(self.statedir.fd)
        held = conversation_archive.encoded_lines(self._archive_first, self._archive_held)
        messages += conversation_archive.parse_lines(held)
        return messages[start:stop]  # type: ignore[return-value]

    def close(self) -> None:
        for fd in (self._activity_fd, self._archive_fd):
            if fd is not None:
                os.close(fd)
        self._activity_fd = self._archive_fd = None
        if self._log is not None:
            self._log.close()
            self._log = None
        self.appends.close()
        self.statedir.close()
