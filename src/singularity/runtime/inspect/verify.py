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
from decimal import Decimal

from singularity.domain import events
from singularity.domain.budget import Budget
from singularity.domain.mind import MAX_MEMORIES
from singularity.domain.state import MAX_RECENT_ACTIONS, AgentState
from singularity.errors import SingularityError
from singularity.money import EXACT, add, parse_money, render_money, sub
from singularity.runtime import ledger
from singularity.runtime.family.tree import is_alive
from singularity.secrets import os_error_text
from singularity.storage import fsio
from singularity.storage.activity import ACTIVITY_FILE, Event, scan
from singularity.storage.conversation_archive import ARCHIVE_FILE
from singularity.storage.statedir import STATE_FILE, TEMP_PATTERN
from singularity.store.directory import check_log, replay
from singularity.store.redo import REDO_FILE
from singularity.timestamps import is_timestamp

SETTLING = (events.CostReserved, events.CostDebited, events.CostReleased)
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
        state, moved = _check_state(dir_fd, found)
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


def _check_state(dir_fd: int, found: Findings) -> tuple[AgentState | None, set[int]]:
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
    problems, warnings = check_log(dir_fd, alive=found.alive)
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


def check_state_invariants(state: AgentState) -> list[str]:
    """Bounds and budget arithmetic that every saved being satisfies."""
    problems = []
    budget = state.budget
    names = ("starting", "api_spent", "instance_spent", "earned", "operator_credited")
    for name in names:
        if getattr(budget, name) < 0:
            problems.append(f"budget.{name} is negative")
    if budget.total_tokens < 0:
        problems.append("budget.total_tokens is negative")
    expected = expected_remaining(budget)
    credits = " + operator credits" if budget.operator_credited else ""
    if expected != budget.remaining and not foreign_rounding(budget):
        problems.append(
            f"budget.remaining is {render_money(budget.remaining)} but starting + earned - "
            f"spent - children funded{credits} is {render_money(expected)}"
        )
    if state.cycle < 0:
        problems.append("cycle is negative")
    if len(state.recent_actions) > MAX_RECENT_ACTIONS:
        problems.append(f"more than {MAX_RECENT_ACTIONS} recent actions")
    if len(state.mind.memories) > MAX_MEMORIES:
        problems.append(f"more than {MAX_MEMORIES} memories")
    return problems


def expected_remaining(budget: Budget) -> Decimal:
    """`starting + earned - api_spent - instance_spent - children_funded + operator_credited`,
    exactly."""
    total = sub(add(budget.starting, budget.earned), budget.api_spent)
    total = sub(sub(total, budget.instance_spent), budget.children_funded)
    return add(total, budget.operator_credited)


def foreign_rounding(budget: Budget) -> bool:
    """Whether `remaining` is off the exact sum only by another runtime's rounding.

    The original keeps money in a 96-bit decimal, which rounds a sum beyond about 28
    significant digits; a budget it wrote (no operation ids) may be off by such rounding,
    never by more than a 10^-24 part of the being's lifetime money.
    """
    if budget.last_operation is not None:
        return False
    lifetime = max(add(budget.starting.copy_abs(), budget.earned.copy_abs()), Decimal(1))
    drift = sub(expected_remaining(budget), budget.remaining).copy_abs()
    return drift <= lifetime.scaleb(-24, context=EXACT)


def state_warnings(state: AgentState) -> list[str]:
    """What is sound but worth saying: a negative balance, which the original allows (§8.2),
    and a balance off the exact sum by the original's rounding."""
    budget = state.budget
    warnings = []
    if budget.remaining < 0:
        warnings.append(
            f"budget.remaining is {render_money(budget.remaining)}: the being spent more than "
            "it had (the original runtime has no debt limit); it stays exhausted until credited"
        )
    expected = expected_remaining(budget)
    if expected != budget.remaining and foreign_rounding(budget):
        warnings.append(
            f"budget.remaining is {render_money(budget.remaining)} but starting + earned - "
            f"spent - children funded is {render_money(expected)}: the rounding of the "
            "runtime that wrote it"
        )
    return warnings


def check_budget_against_journal(state: AgentState, journal: list[Event]) -> list[str]:
    """Once debits exist, the budget's spend equals the sum of journaled debits."""
    debits = [event for event in journal if events.kind_of(event) is events.CostDebited]
    if not debits:
        return []
    total = Decimal(0)
    for event in debits:
        try:
            total = add(total, parse_money(event.get("amount")))
        except ValueError:
            return [f"cost_debited event with an invalid amount: {event.get('amount')!r}"]
    spent = add(state.budget.api_spent, state.budget.instance_spent)
    if total != spent:
        return [
            f"journaled debits total {render_money(total)} but the budget shows "
            f"{render_money(spent)} spent"
        ]
    return _check_debit_parts(state, debits)


def _check_debit_parts(state: AgentState, debits: list[Event]) -> list[str]:
    """When every debit carries its parts (decision 16), each part's sum equals the budget's."""
    if not all(isinstance(e.get("tokens"), int) and "api" in e and "instance" in e for e in debits):
        return []
    budget = state.budget
    problems = []
    try:
        for part in ("api", "instance"):
            total = Decimal(0)
            for event in debits:
                total = add(total, parse_money(event[part]))
            held = getattr(budget, f"{part}_spent")
            if total != held:
                problems.append(
                    f"journaled debits total {render_money(total)} {part} but the budget shows "
                    f"{render_money(held)} {part}_spent"
                )
    except ValueError:
        return ["cost_debited event with an invalid api or instance part"]
    tokens = min(sum(int(event["tokens"]) for event in debits), 2**64 - 1)
    if tokens != budget.total_tokens:
        problems.append(
            f"journaled debits count {tokens} tokens but the budget shows {budget.total_tokens}"
        )
    return problems


def check_ledger_against_journal(
    state: AgentState, journal: list[Event], journal_name: str = ACTIVITY_FILE
) -> list[str]:
    """Reservations, outcomes and the budget's newest operation agree (decision 16).

    Every `cost_reserved` has exactly one outcome (`cost_debited` or `cost_released`) after
    it, no operation is reserved or settled twice, and the budget reflects every journaled
    ledger entry. Events without an operation id (baseline journals) are left to the sums.
    """
    problems = []
    reserved: set[str] = set()
    settled: set[str] = set()
    for number, event in enumerate(journal, start=1):
        kind, operation = events.kind_of(event), event.get("operation_id")
        if not isinstance(operation, str) or kind not in SETTLING:
            continue
        where = f"{journal_name} {'line' if journal_name == ACTIVITY_FILE else 'event'} {number}"
        if kind is events.CostReserved:
            if operation in reserved:
                problems.append(f"{where} reserves operation {operation} again")
            reserved.add(operation)
        elif operation not in reserved:
            problems.append(f"{where} settles operation {operation}, which was never reserved")
        elif operation in settled:
            problems.append(f"{where} settles operation {operation} again")
        else:
            settled.add(operation)
    unsettled = len(reserved - settled)
    if unsettled:
        problems.append(f"{unsettled} reservation(s) have no outcome (the next boot charges them)")
    last = state.budget.last_operation
    if last is not None and not any(e.get("operation_id") == last for e in journal):
        problems.append(f"the budget's newest operation {last} is not in {journal_name}")
        return problems
    missed, _ = ledger.unsettled(state.budget, journal)
    if missed:
        problems.append(
            f"the budget misses {len(missed)} journaled ledger entr"
            f"{'y' if len(missed) == 1 else 'ies'} (the next boot applies them)"
        )
    return problems


def _check_archive(dir_fd: int, state: AgentState, moved: set[int], found: Findings) -> None:
    """`conversation.jsonl` holds exactly the messages the state says it archived (decision 8).

    Messages that steps in `state.redo` archived (`moved`) and the file lacks are what a
    boot writes back.
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
        found.settling(
            f"{ARCHIVE_FILE} lacks {expected - held} message(s) state.redo archived "
            "(the next boot writes them back)",
            f"{ARCHIVE_FILE} lacks {expected - held} message(s) the being is saving",
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
