"""`singularity verify`: every invariant of a state directory, checked without changing it.

It accepts any valid being-v1 directory, including one written by hand or by another
implementation of the spec, and lists everything that is wrong. It may run beside a living
being (decision 25): what that being is in the middle of (a model call in flight, a save)
is a warning, not a problem.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from singularity.domain.state import AgentState
from singularity.errors import SingularityError
from singularity.runtime import ledger
from singularity.runtime.family.tree import is_alive
from singularity.runtime.inspect.invariants import (
    check_budget_against_journal,
    check_ledger_against_journal,
    check_state_invariants,
    state_warnings,
)
from singularity.secrets import os_error_text
from singularity.storage import fsio
from singularity.storage.activity import ACTIVITY_FILE, Event, scan
from singularity.storage.conversation_archive import ARCHIVE_FILE
from singularity.storage.statedir import STATE_FILE, TEMP_PATTERN
from singularity.store.directory import check_log, replay
from singularity.store.redo import REDO_FILE
from singularity.timestamps import is_timestamp

STORED_JOURNAL = "the stored activity journal"


def _mode_problem(name: str, info: os.stat_result, allowed: int) -> str | None:
    if info.st_uid != os.geteuid():
        return f"{name} is owned by another user"
    if stat.S_IMODE(info.st_mode) & ~allowed:
        return f"{name} has mode {stat.S_IMODE(info.st_mode):o}; expected {allowed:o} at most"
    return None


@dataclass
class Findings:
    """What `verify` found: problems (the directory is not sound) and warnings (it is)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    alive: bool = False
    """A runtime holds the lock: the state may lag the journal by the step in progress."""

    def settling(self, stopped: str, living: str) -> None:
        """What a boot repairs by design: a problem on a stopped being, a warning beside a
        living one, which is in the middle of writing it."""
        if self.alive:
            self.warnings.append(living)
        else:
            self.problems.append(stopped)


def verify_state_dir(path: str) -> list[str]:
    """Every problem found in the state directory; empty when it is sound."""
    return inspect_state_dir(path).problems


def inspect_state_dir(path: str, *, alive: bool | None = None) -> Findings:
    """Every problem and every warning about the state directory.

    Beside a living being (`alive`, by default whether a runtime holds the lock) a model
    call in flight, a journaled step not yet saved and a journal line being written are
    reported as warnings: the runtime settles them itself.
    """
    try:
        info = os.lstat(path)
    except OSError as error:
        return Findings([f"cannot open {path}: {os_error_text(error)}"])
    if stat.S_ISLNK(info.st_mode):
        return Findings([f"{path} is a symlink"])
    if not stat.S_ISDIR(info.st_mode):
        return Findings([f"{path} is not a directory"])
    found = Findings(alive=is_alive(path) if alive is None else alive)
    found.problems += [p for p in [_mode_problem("state directory", info, 0o700)] if p]
    dir_fd = fsio.open_dir(path)
    try:
        _check_entries(dir_fd, found)
        state, moved = _check_state(dir_fd, path, found)
        journal = _check_journal(dir_fd, found)
        if state is not None:
            found.problems += check_state_invariants(state)
            found.warnings += state_warnings(state)
            if journal is not None:
                settled = _settled_part(state, journal, found)
                found.problems += check_budget_against_journal(state, settled)
                found.problems += check_ledger_against_journal(state, settled)
            _check_archive(dir_fd, state, moved, found)
    finally:
        os.close(dir_fd)
    return found


def inspect_postgres(url: str, agent_id: str) -> Findings:
    """Every problem and every warning about a being in a PostgreSQL state store.

    The being is read in one read-only transaction, without its lease; beside a runtime
    that holds the lease, what it is in the middle of is a warning, as in a directory.
    """
    from singularity.state_place import shown_url
    from singularity.store.postgres.reader import peek_being

    try:
        peek = peek_being(url, agent_id)
    except SingularityError as error:
        return Findings([str(error)])
    if peek is None:
        return Findings([f"no being {agent_id} in {shown_url(url)}"])
    found = Findings(alive=peek.alive)
    state, journal = peek.state, peek.events
    for number, event in enumerate(journal, start=1):
        at = event.get("at")
        if not isinstance(at, str) or not is_timestamp(at):
            found.problems.append(f"{STORED_JOURNAL} event {number} has no valid `at` timestamp")
    found.problems += check_state_invariants(state)
    found.warnings += state_warnings(state)
    settled = _settled_part(state, journal, found)
    found.problems += check_budget_against_journal(state, settled)
    found.problems += check_ledger_against_journal(state, settled, STORED_JOURNAL)
    expected = state.mind.conversation_archived
    if peek.archived_rows != expected:
        found.problems.append(
            f"the store holds {peek.archived_rows} archived messages but the state archived "
            f"{expected}"
        )
    return found


def _settled_part(state: AgentState, journal: list[Event], found: Findings) -> list[Event]:
    """The journal without what a living being has yet to settle or save.

    The call in flight has only its reservation; an entry journaled just before a save is
    not in `state.json` yet. A stopped being's journal is checked whole.
    """
    if not found.alive:
        return journal
    missed, pending = ledger.unsettled(state.budget, journal)
    for event in pending:
        found.warnings.append(
            f"a model call is in flight (operation {event['operation_id']}): its reservation "
            "is settled when it answers"
        )
    if missed:
        found.warnings.append(
            f"{len(missed)} journaled ledger entr{'y is' if len(missed) == 1 else 'ies are'} "
            "not saved yet: the being is saving"
        )
    open_operations = {event.get("operation_id") for event in (*missed, *pending)}
    return [event for event in journal if event.get("operation_id") not in open_operations]


def _check_entries(dir_fd: int, found: Findings) -> None:
    problems = found.problems
    for name in sorted(os.listdir(dir_fd)):
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if TEMP_PATTERN.fullmatch(name):
            found.settling(f"leftover temp file {name}", f"temp file {name}: a save is under way")
        elif name in (STATE_FILE, REDO_FILE, ACTIVITY_FILE, "lock", ARCHIVE_FILE):
            if not stat.S_ISREG(info.st_mode):
                problems.append(f"{name} is not a regular file")
            else:
                problems += [p for p in [_mode_problem(name, info, 0o600)] if p]
        elif name in ("sanctum", "logs"):
            # The sanctum's files are the operator's to edit too, the logs' are only the
            # skill servers' stderr: only the folder itself is checked.
            if not stat.S_ISDIR(info.st_mode):
                problems.append(f"{name} is not a directory")
            else:
                problems += [p for p in [_mode_problem(name, info, 0o700)] if p]


def _check_state(dir_fd: int, path: str, found: Findings) -> tuple[AgentState | None, set[int]]:
    """The current state (`state.json` with `state.redo` replayed) and the indexes of the
    messages the replayed steps archived; what is wrong with either goes to `found`."""
    try:
        os.stat(STATE_FILE, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        found.problems.append("state.json is missing")
        return None, set()
    except OSError as error:
        found.problems.append(f"cannot read state.json: {os_error_text(error)}")
        return None, set()
    problems, warnings = check_log(dir_fd, path, alive=found.alive)
    found.problems += problems
    found.warnings += warnings
    try:
        current = replay(dir_fd)
    except SingularityError as error:
        if not problems:
            found.problems.append(str(error))
        return None, set()
    return current.state, set(current.archived)


def _check_journal(dir_fd: int, found: Findings) -> list[Event] | None:
    try:
        data = fsio.read_at(dir_fd, ACTIVITY_FILE, 1 << 40)
    except FileNotFoundError:
        return []
    except OSError as error:
        found.problems.append(f"cannot read activity.jsonl: {os_error_text(error)}")
        return None
    try:
        scanned = scan(data)
    except SingularityError as error:
        found.problems.append(str(error))
        return None
    if scanned.torn_bytes:
        found.settling(
            f"activity.jsonl ends with a torn line of {scanned.torn_bytes} bytes "
            "(the next boot cuts it)",
            "activity.jsonl ends with a line being written",
        )
    for number, event in enumerate(scanned.events, start=1):
        at = event.get("at")
        if not isinstance(at, str) or not is_timestamp(at):
            found.problems.append(f"activity.jsonl line {number} has no valid `at` timestamp")
    return scanned.events


def _check_archive(dir_fd: int, state: AgentState, moved: set[int], found: Findings) -> None:
    """`conversation.jsonl` holds exactly the messages the state says it archived (decision 8).

    Messages that steps in `state.redo` archived (`moved`) and the file lacks are what a
    boot writes back (a living being's steps do not write them one by one).
    """
    try:
        data = fsio.read_at(dir_fd, ARCHIVE_FILE, 1 << 40)
    except FileNotFoundError:
        data = b""
    except OSError as error:
        found.problems.append(f"cannot read {ARCHIVE_FILE}: {os_error_text(error)}")
        return
    held, expected = data.count(b"\n"), state.mind.conversation_archived
    if held < expected and all(index in moved for index in range(held, expected)):
        if not found.alive:  # a living being writes them in batches, or at its checkpoint
            found.problems.append(
                f"{ARCHIVE_FILE} lacks {expected - held} message(s) state.redo archived "
                "(the next boot writes them back)"
            )
    elif held < expected:
        found.problems.append(
            f"{ARCHIVE_FILE} holds {held} messages but the state archived {expected}"
        )
    elif held > expected:
        found.settling(
            f"{ARCHIVE_FILE} holds {held - expected} message(s) beyond the {expected} the state "
            "archived (the next boot cuts them)",
            f"{ARCHIVE_FILE} holds {held - expected} message(s) the being is saving",
        )
    if data and not data.endswith(b"\n"):
        found.settling(
            f"{ARCHIVE_FILE} ends with a torn line (the next boot cuts it)",
            f"{ARCHIVE_FILE} ends with a line being written",
        )
