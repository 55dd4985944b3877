"""The invariants of a saved being and its journal, wherever they are stored: the bounds and
the budget's arithmetic, and the budget and the ledger against the journaled events."""

from __future__ import annotations

from decimal import Decimal

from singularity.domain import events
from singularity.domain.budget import Budget
from singularity.domain.mind import MAX_MEMORIES
from singularity.domain.state import MAX_RECENT_ACTIONS, AgentState
from singularity.money import EXACT, add, parse_money, render_money, sub
from singularity.runtime import ledger
from singularity.storage.activity import ACTIVITY_FILE, Event

SETTLING = (events.CostReserved, events.CostDebited, events.CostReleased)


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
