"""Money that cannot be overspent and is debited exactly once (spec §8, decisions 15, 16, 30).

Before every model call the worst-case cost is reserved (journaled); if `remaining`
cannot cover it the call is not made. After the call the actual cost is journaled as
`cost_debited` with the reservation's operation id and applied to the budget; the
budget remembers the newest operation it applied. A call whose outcome is unknown (a
timeout, a connection lost after the request was sent) is charged its reservation: the
gateway may have done the work. At boot, `reconcile` applies journaled entries the
saved budget missed and charges reservations whose call never reported back, so a crash
can neither lose nor double a debit.

All of it is exact (see `singularity.money`): a charge is rounded up to the 28th decimal
place only where a price makes more places, and every sum of the budget is taken
without rounding, so `starting + earned + operator credits − spent − given to children
== remaining` holds to the last digit. Operator credits (funds added by hand) are kept
apart from `earned`: they are not revenue.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal

from pydantic import ValidationError

from singularity.config import Settings
from singularity.domain import events
from singularity.domain.budget import Budget
from singularity.errors import StateError
from singularity.money import (
    EXACT,
    LIMIT,
    RANGE_TEXT,
    ZERO,
    add,
    mul,
    parse_money,
    ratio_up,
    round_up,
    sub,
)
from singularity.runtime.being import LiveBeing
from singularity.storage.activity import Event

MILLION = Decimal(1_000_000)
# Journal events that change the budget, each carrying an operation id (decisions 16, 17).
LEDGER_RECORDS: tuple[type[events.ActivityEvent], ...] = (
    events.CostDebited,
    events.ChildFunded,
    events.ChildRefunded,
    events.RevenueCredited,
    events.OperatorCredited,
)
LEDGER_ENTRIES = tuple(kind.type for kind in LEDGER_RECORDS)
NANOS_PER_HOUR = Decimal(3_600_000_000_000)
NANOS_PER_SECOND = 1_000_000_000
MILLIS_PER_HOUR = Decimal(3_600_000)
U64_MAX = 2**64 - 1


@dataclass(frozen=True)
class Prices:
    """Configured prices: USD per million prompt and completion tokens, USD per hour."""

    input_per_million: Decimal
    output_per_million: Decimal
    instance_per_hour: Decimal

    @classmethod
    def from_settings(cls, settings: Settings) -> Prices:
        """The prices a configuration sets."""
        return cls(settings.input_price, settings.output_price, settings.instance_price)


@dataclass(frozen=True)
class Charge:
    """A cost split into its token part and its instance-time part."""

    api: Decimal
    instance: Decimal
    tokens: int = 0

    @property
    def total(self) -> Decimal:
        """Token cost plus instance cost."""
        return add(self.api, self.instance)


def token_cost(prices: Prices, prompt_tokens: int, completion_tokens: int) -> Decimal:
    """What the tokens cost, exactly, rounded up to 28 places only if the prices need more."""
    prompt = Decimal(min(prompt_tokens, U64_MAX))
    completion = Decimal(min(completion_tokens, U64_MAX))
    return round_up(
        add(
            EXACT.divide(mul(prompt, prices.input_per_million), MILLION),
            EXACT.divide(mul(completion, prices.output_per_million), MILLION),
        )
    )


def instance_cost(prices: Prices, elapsed_ns: int) -> Decimal:
    """What `elapsed_ns` of instance time costs, rounded up to 28 places."""
    if prices.instance_per_hour == 0 or elapsed_ns <= 0:
        return ZERO
    elapsed = Decimal(min(elapsed_ns, U64_MAX))
    return ratio_up(mul(elapsed, prices.instance_per_hour), NANOS_PER_HOUR)


def price(prices: Prices, prompt_tokens: int, completion_tokens: int, elapsed_ns: int) -> Charge:
    """The cost of a completion (spec §8.2)."""
    return Charge(
        token_cost(prices, prompt_tokens, completion_tokens),
        instance_cost(prices, elapsed_ns),
        prompt_tokens + completion_tokens,
    )


def worst_case(prices: Prices, prompt_tokens: int, max_tokens: int, deadline_secs: float) -> Charge:
    """The most a call can cost: its prompt estimate, `max_tokens` out, its whole deadline."""
    return Charge(
        token_cost(prices, prompt_tokens, max_tokens),
        instance_cost(prices, _nanos(deadline_secs)),
        0,
    )


def _nanos(seconds: float) -> int:
    """Seconds as written (`0.1` is 100 ms, not its binary neighbour) in nanoseconds."""
    return int(mul(Decimal(repr(float(seconds))), Decimal(NANOS_PER_SECOND)))


def affordable_deadline(
    prices: Prices, budget: Budget, tokens: Decimal, timeout_secs: float
) -> float:
    """The longest deadline up to `timeout_secs` the balance can pay once `tokens` is set aside.

    `timeout_secs` itself when instance time is free or the balance covers all of it.
    """
    hourly = prices.instance_per_hour
    left = sub(budget.remaining, tokens)
    if hourly == 0 or left >= instance_cost(prices, _nanos(timeout_secs)):
        return timeout_secs
    if left <= 0:
        return 0.0
    # Whole milliseconds, rounded down: never more time than the balance pays for.
    millis = int(EXACT.divide_int(mul(left, MILLIS_PER_HOUR), hourly))
    return min(timeout_secs, millis / 1000)


def new_operation_id() -> str:
    """A fresh operation id."""
    return str(uuid.uuid4())


def can_cover(budget: Budget, reservation: Charge) -> bool:
    """Whether the budget is solvent and can pay the reservation in full."""
    return budget.solvent and budget.remaining >= reservation.total


def reserve(being: LiveBeing, operation_id: str, reservation: Charge) -> None:
    """Journal the reservation before the call is made."""
    being.journal(
        events.CostReserved(
            being.now(), being.state.cycle, operation_id, reservation.api, reservation.instance
        )
    )


def release(being: LiveBeing, operation_id: str) -> None:
    """Journal that a reserved call failed and costs nothing."""
    being.journal(events.CostReleased(being.now(), being.state.cycle, operation_id))


def capped(budget: Budget, charge: Charge) -> Charge:
    """The charge, cut so that `remaining` never goes below zero."""
    if charge.total <= budget.remaining:
        return charge
    api = min(charge.api, max(budget.remaining, ZERO))
    return Charge(api, sub(max(budget.remaining, ZERO), api), charge.tokens)


def apply_debit(budget: Budget, operation_id: str, charge: Charge) -> None:
    """Apply one debit to the budget and remember its operation."""
    budget.api_spent = add(budget.api_spent, charge.api)
    budget.instance_spent = add(budget.instance_spent, charge.instance)
    budget.remaining = sub(budget.remaining, charge.total)
    budget.total_tokens = min(budget.total_tokens + charge.tokens, 2**64 - 1)
    budget.last_operation = operation_id


def debit(being: LiveBeing, operation_id: str, charge: Charge) -> Charge:
    """Journal and apply the actual cost of a completed call; returns what was charged."""
    charged = capped(being.state.budget, charge)
    being.journal(
        events.CostDebited(
            being.now(),
            being.state.cycle,
            operation_id,
            charged.api,
            charged.instance,
            charged.tokens,
        )
    )
    apply_debit(being.state.budget, operation_id, charged)
    return charged


def charge_reservation(being: LiveBeing, operation_id: str, reservation: Charge) -> Charge:
    """Debit a call's whole reservation: its outcome or its usage is unknown (decisions 22, 30).

    The gateway may have done the work and will not say how much, so the worst case that
    was reserved is what it cost; no tokens are counted, since none were reported.
    """
    return debit(being, operation_id, Charge(reservation.api, reservation.instance, 0))


def apply_funding(budget: Budget, operation_id: str, amount: Decimal) -> None:
    """Move funds from the budget to a child (decision 17)."""
    budget.remaining = sub(budget.remaining, amount)
    budget.children_funded = add(budget.children_funded, amount)
    budget.last_operation = operation_id


def credit_room(budget: Budget) -> Decimal:
    """How much more money the budget can take: its lifetime money (starting balance,
    earnings, operator credits) stays within the range."""
    lifetime = add(add(budget.starting, budget.earned), budget.operator_credited)
    return max(sub(LIMIT, lifetime), ZERO)


def credit(being: LiveBeing, amount: Decimal, source: str) -> Decimal | None:
    """Journal and apply trusted revenue (spec §8.3); the amount credited, None if nothing.

    The credit is a ledger entry with its own operation id, journaled before the save that
    follows, so a resume applies a credit the saved budget missed exactly once. Revenue
    that would take the being's lifetime money (starting balance plus earnings) beyond
    the money range is not credited; a warning says so.
    """
    if amount < 0:
        raise StateError("revenue cannot be negative")
    if amount == 0:
        return None
    if amount > credit_room(being.state.budget):
        being.journal(
            events.Warned(
                being.now(),
                being.state.cycle,
                f"revenue from {source} not credited: the balance must stay {RANGE_TEXT}",
            )
        )
        return None
    operation = new_operation_id()
    being.journal(events.RevenueCredited(being.now(), being.state.cycle, amount, source, operation))
    apply_credit(being.state.budget, operation, amount, revenue=True)
    return amount


def apply_credit(budget: Budget, operation_id: str, amount: Decimal, *, revenue: bool) -> None:
    """Add a credit to `remaining` and remember its operation; revenue counts as `earned`,
    an operator's top-up as `operator_credited`."""
    if revenue:
        budget.earned = add(budget.earned, amount)
    else:
        budget.operator_credited = add(budget.operator_credited, amount)
    budget.remaining = add(budget.remaining, amount)
    budget.last_operation = operation_id


def operator_credit(being: LiveBeing, amount: Decimal, request_id: str, note: str) -> Decimal:
    """Journal and apply an operator's top-up: `remaining` grows, `earned` does not.

    The amount comes checked from the request (positive, in the money range, bounded).

    Like revenue it is a ledger entry with its own operation id, journaled before the save
    that follows, so a resume applies a credit the saved budget missed exactly once. A
    credit that would take the lifetime money beyond the money range is refused.
    """
    if amount <= 0:
        raise StateError("an operator credit must be more than zero")
    if amount > credit_room(being.state.budget):
        raise StateError(f"an operator credit must keep the balance {RANGE_TEXT}")
    operation = new_operation_id()
    cycle = being.state.cycle
    being.journal(
        events.OperatorCredited(
            being.now(),
            cycle,
            amount=amount,
            operation_id=operation,
            request_id=request_id,
            note=note,
        )
    )
    apply_credit(being.state.budget, operation, amount, revenue=False)
    return amount


def apply_entry(budget: Budget, event: Event) -> None:
    """Apply one journaled ledger entry (a debit, a funding, a refund, a credit) to the budget."""
    operation = str(event["operation_id"])
    kind = events.kind_of(event)
    if kind is events.CostDebited:
        apply_debit(budget, operation, charge_of(event))
    elif kind is events.RevenueCredited:
        apply_credit(budget, operation, _amount(event, "amount"), revenue=True)
    elif kind is events.OperatorCredited:
        apply_credit(budget, operation, _amount(event, "amount"), revenue=False)
    elif kind is events.ChildFunded:
        apply_funding(budget, operation, _amount(event, "amount"))
    elif kind is events.ChildRefunded:
        apply_funding(budget, operation, _amount(event, "amount").copy_negate())


def _invalid(event: Event, name: str, value: object) -> StateError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return StateError(
        f"activity.jsonl: {event.get('type')} {event.get('operation_id')} has an invalid "
        f"{name}: {shown}"
    )


def _amount(event: Event, name: str, default: object = None) -> Decimal:
    """A journaled amount the boot replays: a non-negative decimal, or a clear state error."""
    value = event.get(name, default)
    try:
        amount = parse_money(value)
    except ValueError:
        raise _invalid(event, name, value) from None
    if amount < 0:
        raise _invalid(event, name, value)
    return amount


def _tokens(event: Event) -> int:
    value = event.get("tokens", 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**64 - 1:
        raise _invalid(event, "token count", value)
    return value


def charge_of(event: Event) -> Charge:
    """The charge a journaled `cost_reserved` or `cost_debited` holds (a `StateError` if bad)."""
    return Charge(
        _amount(event, "api", event.get("amount")),
        _amount(event, "instance", "0"),
        _tokens(event),
    )


def unsettled(budget: Budget, journal: list[Event]) -> tuple[list[Event], list[Event]]:
    """Debits the budget has not applied, and reservations with no outcome, after its newest."""
    start = 0
    if budget.last_operation is not None:
        for index, event in enumerate(journal):
            if (
                events.kind_of(event) in LEDGER_RECORDS
                and event.get("operation_id") == budget.last_operation
            ):
                start = index + 1
        if start == 0:
            # The journal does not hold the budget's newest debit: nothing can be matched safely.
            return [], []
    pending: dict[str, Event] = {}
    missed: list[Event] = []
    for event in journal[start:]:
        kind = events.kind_of(event)
        operation = event.get("operation_id")
        if not isinstance(operation, str):
            continue
        if kind is events.CostReserved:
            pending[operation] = event
        elif kind is events.CostReleased:
            pending.pop(operation, None)
        elif kind in LEDGER_RECORDS:
            pending.pop(operation, None)
            missed.append(event)
    return missed, list(pending.values())


def reconcile(being: LiveBeing, journal: list[Event]) -> int:
    """Bring the budget level with the journal at boot; returns how many debits were applied."""
    budget = being.state.budget
    missed, orphans = unsettled(budget, journal)
    for event in missed:
        apply_entry(budget, event)
    charges = [charge_of(reservation) for reservation in orphans]
    if missed:
        _check_loadable(budget)  # before anything is journaled: a refusal writes nothing
    for reservation, charge in zip(orphans, charges, strict=True):
        # The call's outcome is unknown: it may have been billed, so its reservation is charged.
        charge_reservation(being, str(reservation["operation_id"]), charge)
    return len(missed) + len(orphans)


def _check_loadable(budget: Budget) -> None:
    """Refuse a journal whose entries would leave a budget `state.json` cannot hold."""
    try:
        Budget.model_validate_json(budget.model_dump_json())
    except ValidationError as error:
        detail = error.errors()[0]
        where = ".".join(str(part) for part in detail["loc"])
        raise StateError(
            f"activity.jsonl: its ledger entries would leave budget.{where} outside the "
            f"money range ({RANGE_TEXT})"
        ) from None
