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


def _reflected_problems(state: AgentState, journal: list[Event]) -> list[str]:
    budget = state.budget
    debits = [e for e in journal if e.get("type") == "cost_debited"]
    ids = debit_ids(journal)
    problems = [f"operation {op} debited {n} times" for op, n in Counter(ids).items() if n > 1]
    if budget.last_operation is None:
        reflected: list[Event] = []
    elif budget.last_operation not in ids:
        return [*problems, f"the budget's newest debit {budget.last_operation} is not journaled"]
    else:
        reflected = debits[: ids.index(budget.last_operation) + 1]
    if len(reflected) != len(debits):
        problems.append(f"{len(debits) - len(reflected)} journaled debit(s) not in the budget")
    api, instance, tokens = Decimal(0), Decimal(0), 0
    for event in reflected:
        api, instance = add(api, parse_money(event["api"])), add(instance, parse_money(event["instance"]))
        tokens += int(event["tokens"])
        if parse_money(event["amount"]) != add(parse_money(event["api"]), parse_money(event["instance"])):
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
        problems.append(f"a second boot would apply {len(missed)} debit(s), {len(orphans)} charge(s)")
    return problems
