"""An oracle for the money of a being after a resume, independent of `verify` (decision 16).

It replays the journal's reservations and debits by operation id and compares them with the
saved budget: every `cost_reserved` has exactly one outcome after it, no operation is
debited twice, the budget reflects exactly the journaled debits (its newest applied debit is
the journal's newest, and the sums of their parts equal the budget's), `remaining` is never
negative and equals starting + earned − spent − children funded.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

from singularity.domain.state import AgentState
from singularity.money import add, parse_money, sub
from singularity.runtime import ledger

Event = dict[str, Any]
SETTLEMENTS = ("cost_debited", "cost_released")
# Events that change the budget and move its newest operation (decisions 16, 17).
BUDGET_ENTRIES = ("cost_debited", "child_funded", "child_refunded", "revenue_credited")


def debit_ids(journal: list[Event]) -> list[str]:
    """The operation ids of the journal's debits, in order."""
    return [str(e["operation_id"]) for e in journal if e.get("type") == "cost_debited"]


def _settlement_problems(journal: list[Event]) -> list[str]:
    problems = []
    reserved: dict[str, Event] = {}
    outcomes: Counter[str] = Counter()
    for event in journal:
        kind, operation = event.get("type"), event.get("operation_id")
        if kind == "cost_reserved":
            if operation in reserved:
                problems.append(f"operation {operation} reserved twice")
            reserved[str(operation)] = event
        elif kind in SETTLEMENTS:
            if operation not in reserved:
                problems.append(f"{kind} of {operation} without a reservation before it")
            outcomes[str(operation)] += 1
            if kind == "cost_debited" and operation in reserved:
                held = reserved[str(operation)]
                for part in ("api", "instance"):
                    if parse_money(event[part]) > parse_money(held[part]):
                        problems.append(f"{operation} debited more {part} than it reserved")
    for operation in reserved:
        if outcomes[operation] != 1:
            problems.append(f"reservation {operation} has {outcomes[operation]} outcomes")
    return problems


def _newest_applied(state: AgentState, journal: list[Event]) -> int | None:
    """The journal index of the budget's newest applied entry; -1 for none, None if absent."""
    last = state.budget.last_operation
    if last is None:
        return -1
    for index in range(len(journal) - 1, -1, -1):
        event = journal[index]
        if event.get("type") in BUDGET_ENTRIES and event.get("operation_id") == last:
            return index
    return None


def _reflected_problems(state: AgentState, journal: list[Event]) -> list[str]:
    budget = state.budget
    ids = debit_ids(journal)
    problems = [f"operation {op} debited {n} times" for op, n in Counter(ids).items() if n > 1]
    newest = _newest_applied(state, journal)
    if newest is None:
        return [*problems, f"the budget's newest entry {budget.last_operation} is not journaled"]
    reflected = [e for e in journal[: newest + 1] if e.get("type") == "cost_debited"]
    if len(reflected) != len(ids):
        problems.append(f"{len(ids) - len(reflected)} journaled debit(s) not in the budget")
    api, instance, tokens = Decimal(0), Decimal(0), 0
    for event in reflected:
        parts = parse_money(event["api"]), parse_money(event["instance"])
        api, instance = add(api, parts[0]), add(instance, parts[1])
        tokens += int(event["tokens"])
        if parse_money(event["amount"]) != add(*parts):
            problems.append(f"debit {event['operation_id']} amount is not api + instance")
    if (api, instance, tokens) != (budget.api_spent, budget.instance_spent, budget.total_tokens):
        problems.append(
            f"debits sum to api {api}, instance {instance}, tokens {tokens}; the budget has "
            f"{budget.api_spent}, {budget.instance_spent}, {budget.total_tokens}"
        )
    return problems


def ledger_problems(state: AgentState, journal: list[Event]) -> list[str]:
    """Everything wrong with the money of a resumed being; empty when sound."""
    budget = state.budget
    problems = _settlement_problems(journal) + _reflected_problems(state, journal)
    if budget.remaining < 0:
        problems.append(f"remaining is negative: {budget.remaining}")
    expected = sub(
        sub(sub(add(budget.starting, budget.earned), budget.api_spent), budget.instance_spent),
        budget.children_funded,
    )
    if expected != budget.remaining:
        problems.append(f"remaining is {budget.remaining}, the budget's parts say {expected}")
    missed, orphans = ledger.unsettled(budget, journal)
    if missed or orphans:
        problems.append(f"a second boot would apply {len(missed)} entries, {len(orphans)} charges")
    return problems
