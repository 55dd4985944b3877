"""`singularity verify`: every invariant of a state directory, checked without changing it.

It accepts any valid being-v1 directory, including one written by hand or by another
implementation of the spec, and lists everything that is wrong.
"""

from __future__ import annotations

import os
import stat
from decimal import Decimal

from singularity.domain.mind import MAX_MEMORIES
from singularity.domain.state import MAX_RECENT_ACTIONS, AgentState, parse_state
from singularity.errors import SingularityError
from singularity.money import add, parse_money, render_money, sub
from singularity.runtime import ledger
from singularity.secrets import os_error_text
from singularity.storage import fsio
from singularity.storage.activity import ACTIVITY_FILE, Event, scan
from singularity.storage.conversation_archive import ARCHIVE_FILE
from singularity.storage.statedir import MAX_STATE_BYTES, STATE_FILE, TEMP_PATTERN
from singularity.timestamps import is_timestamp

SETTLING = ("cost_reserved", "cost_debited", "cost_released")


def _mode_problem(name: str, info: os.stat_result, allowed: int) -> str | None:
    if info.st_uid != os.geteuid():
        return f"{name} is owned by another user"
    if stat.S_IMODE(info.st_mode) & ~allowed:
        return f"{name} has mode {stat.S_IMODE(info.st_mode):o}; expected {allowed:o} at most"
    return None


def verify_state_dir(path: str) -> list[str]:
    """Every problem found in the state directory; empty when it is sound."""
    try:
        info = os.lstat(path)
    except OSError as error:
        return [f"cannot open {path}: {os_error_text(error)}"]
    if stat.S_ISLNK(info.st_mode):
        return [f"{path} is a symlink"]
    if not stat.S_ISDIR(info.st_mode):
        return [f"{path} is not a directory"]
    problems = [p for p in [_mode_problem("state directory", info, 0o700)] if p]
    dir_fd = fsio.open_dir(path)
    try:
        problems += _check_entries(dir_fd)
        state, state_problems = _check_state(dir_fd)
        problems += state_problems
        journal, journal_problems = _check_journal(dir_fd)
        problems += journal_problems
        if state is not None:
            problems += check_state_invariants(state)
            if journal is not None:
                problems += check_budget_against_journal(state, journal)
                problems += check_ledger_against_journal(state, journal)
            problems += _check_archive(dir_fd, state)
    finally:
        os.close(dir_fd)
    return problems


def _check_entries(dir_fd: int) -> list[str]:
    problems = []
    for name in sorted(os.listdir(dir_fd)):
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if TEMP_PATTERN.fullmatch(name):
            problems.append(f"leftover temp file {name}")
        elif name in (STATE_FILE, ACTIVITY_FILE, "lock", "conversation.jsonl"):
            if not stat.S_ISREG(info.st_mode):
                problems.append(f"{name} is not a regular file")
            else:
                problems += [p for p in [_mode_problem(name, info, 0o600)] if p]
        elif name == "sanctum":
            # Its files are the operator's to edit too; only the folder itself is checked.
            if not stat.S_ISDIR(info.st_mode):
                problems.append("sanctum is not a directory")
            else:
                problems += [p for p in [_mode_problem(name, info, 0o700)] if p]
    return problems


def _check_state(dir_fd: int) -> tuple[AgentState | None, list[str]]:
    try:
        data = fsio.read_at(dir_fd, STATE_FILE, MAX_STATE_BYTES)
    except FileNotFoundError:
        return None, ["state.json is missing"]
    except OSError as error:
        return None, [f"cannot read state.json: {os_error_text(error)}"]
    try:
        return parse_state(data), []
    except SingularityError as error:
        return None, [str(error)]


def _check_journal(dir_fd: int) -> tuple[list[Event] | None, list[str]]:
    try:
        data = fsio.read_at(dir_fd, ACTIVITY_FILE, 1 << 40)
    except FileNotFoundError:
        return [], []
    except OSError as error:
        return None, [f"cannot read activity.jsonl: {os_error_text(error)}"]
    try:
        found = scan(data)
    except SingularityError as error:
        return None, [str(error)]
    problems = []
    if found.torn_bytes:
        problems.append(
            f"activity.jsonl ends with a torn line of {found.torn_bytes} bytes "
            "(the next boot cuts it)"
        )
    for number, event in enumerate(found.events, start=1):
        at = event.get("at")
        if not isinstance(at, str) or not is_timestamp(at):
            problems.append(f"activity.jsonl line {number} has no valid `at` timestamp")
    return found.events, problems


def check_state_invariants(state: AgentState) -> list[str]:
    """Bounds and budget arithmetic that every saved being satisfies."""
    problems = []
    budget = state.budget
    for name in ("starting", "remaining", "api_spent", "instance_spent", "earned"):
        if getattr(budget, name) < 0:
            problems.append(f"budget.{name} is negative")
    if budget.total_tokens < 0:
        problems.append("budget.total_tokens is negative")
    expected = sub(
        sub(add(budget.starting, budget.earned), budget.api_spent), budget.instance_spent
    )
    expected = sub(expected, budget.children_funded)
    if expected != budget.remaining:
        problems.append(
            f"budget.remaining is {render_money(budget.remaining)} but starting + earned - "
            f"spent - children funded is {render_money(expected)}"
        )
    if state.cycle < 0:
        problems.append("cycle is negative")
    if len(state.recent_actions) > MAX_RECENT_ACTIONS:
        problems.append(f"more than {MAX_RECENT_ACTIONS} recent actions")
    if len(state.mind.memories) > MAX_MEMORIES:
        problems.append(f"more than {MAX_MEMORIES} memories")
    return problems


def check_budget_against_journal(state: AgentState, journal: list[Event]) -> list[str]:
    """Once debits exist, the budget's spend equals the sum of journaled debits."""
    debits = [event for event in journal if event.get("type") == "cost_debited"]
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


def check_ledger_against_journal(state: AgentState, journal: list[Event]) -> list[str]:
    """Reservations, outcomes and the budget's newest operation agree (decision 16).

    Every `cost_reserved` has exactly one outcome (`cost_debited` or `cost_released`) after
    it, no operation is reserved or settled twice, and the budget reflects every journaled
    ledger entry. Events without an operation id (baseline journals) are left to the sums.
    """
    problems = []
    reserved: set[str] = set()
    settled: set[str] = set()
    for number, event in enumerate(journal, start=1):
        kind, operation = event.get("type"), event.get("operation_id")
        if not isinstance(operation, str) or kind not in SETTLING:
            continue
        where = f"activity.jsonl line {number}"
        if kind == "cost_reserved":
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
        problems.append(f"the budget's newest operation {last} is not in activity.jsonl")
        return problems
    missed, _ = ledger.unsettled(state.budget, journal)
    if missed:
        problems.append(
            f"the budget misses {len(missed)} journaled ledger entr"
            f"{'y' if len(missed) == 1 else 'ies'} (the next boot applies them)"
        )
    return problems


def _check_archive(dir_fd: int, state: AgentState) -> list[str]:
    """`conversation.jsonl` holds exactly the messages the state says it archived (decision 8)."""
    try:
        data = fsio.read_at(dir_fd, ARCHIVE_FILE, 1 << 40)
    except FileNotFoundError:
        data = b""
    except OSError as error:
        return [f"cannot read {ARCHIVE_FILE}: {os_error_text(error)}"]
    held, expected = data.count(b"\n"), state.mind.conversation_archived
    problems = []
    if held < expected:
        problems.append(f"{ARCHIVE_FILE} holds {held} messages but the state archived {expected}")
    elif held > expected:
        problems.append(
            f"{ARCHIVE_FILE} holds {held - expected} message(s) beyond the {expected} the state "
            "archived (the next boot cuts them)"
        )
    if data and not data.endswith(b"\n"):
        problems.append(f"{ARCHIVE_FILE} ends with a torn line (the next boot cuts it)")
    return problems
