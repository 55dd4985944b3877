"""Money that cannot be overspent and is debited exactly once (spec §8, decisions 15–16).

Before every model call the worst-case cost is reserved (journaled); if `remaining`
cannot cover it the call is not made. After the call the actual cost is journaled as
`cost_debited` with the reservation's operation id and applied to the budget; the
budget remembers the newest operation it applied. At boot, `reconcile` applies
journaled debits the saved budget missed and charges reservations whose call never
reported back, so a crash can neither lose nor double a debit.

Every charge is rounded (half-even) to a picodollar. Unrounded, an instance cost is a
28-digit fraction (elapsed time over 3.6e12 ns) and subtracting it from `remaining` rounds
differently from adding it to `instance_spent`, so `starting + earned − spent == remaining`
drifted by 1e-27 within a few calls; rounded charges keep every sum exact for balances up
to 1e15 USD.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal

from singularity.config import Settings
from singularity.domain import events
from singularity.domain.budget import Budget
from singularity.errors import StateError
from singularity.money import MONEY_CONTEXT, ZERO, add, div, mul, parse_money, sub
from singularity.runtime.being import LiveBeing
from singularity.storage.activity import Event

MILLION = Decimal(1_000_000)
# Journal events that change the budget, each carrying an operation id (decisions 16, 17).
LEDGER_ENTRIES = ("cost_debited", "child_funded", "child_refunded", "revenue_credited")
NANOS_PER_HOUR = Decimal(3_600_000_000_000)
CHARGE_QUANTUM = Decimal("1e-12")


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


def price(
    prices: Prices, prompt_tokens: int, completion_tokens: int, elapsed_ns: int
) -> Charge:
    """The cost of a completion (spec §8.2), each part rounded to a picodollar."""
    api = add(
        div(mul(Decimal(prompt_tokens), prices.input_per_million), MILLION),
        div(mul(Decimal(completion_tokens), prices.output_per_million), MILLION),
    )
    instance = div(mul(Decimal(elapsed_ns), prices.instance_per_hour), NANOS_PER_HOUR)
    return Charge(_rounded(api), _rounded(instance), prompt_tokens + completion_tokens)


def _rounded(amount: Decimal) -> Decimal:
    """The amount to a picodollar, keeping a shorter scale (`0`, `0.0035`) as it is.

    Amounts too large to hold twelve places in 28 digits (1e16 USD and more) stay as they are.
    """
    if amount.adjusted() + 13 > MONEY_CONTEXT.prec:
        return amount
    rounded = amount.quantize(CHARGE_QUANTUM, context=MONEY_CONTEXT)
    if rounded == amount:
        return amount
    return rounded if rounded != 0 else ZERO


def worst_case(prices: Prices, prompt_bytes: int, max_tokens: int, timeout_secs: float) -> Charge:
    """The most a call can cost: every prompt byte a token, `max_tokens` out, the whole timeout."""
    timeout_ns = int(Decimal(str(timeout_secs)) * Decimal(1_000_000_000))
    return price(prices, prompt_bytes, max_tokens, timeout_ns)


def new_operation_id() -> str:
    """A fresh operation id."""
    return str(uuid.uuid4())


def can_cover(budget: Budget, reservation: Charge) -> bool:
    """Whether the budget is solvent and can pay the reservation in full."""
    return budget.solvent and budget.remaining >= reservation.total


def reserve(being: LiveBeing, operation_id: str, reservation: Charge) -> None:
    """Journal the reservation before the call is made."""
    being.journal(
        events.cost_reserved(
            being.now(), being.state.cycle, operation_id, reservation.api, reservation.instance
        )
    )


def release(being: LiveBeing, operation_id: str) -> None:
    """Journal that a reserved call failed and costs nothing."""
    being.journal(events.cost_released(being.now(), being.state.cycle, operation_id))


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
        events.cost_debited(
            being.now(), being.state.cycle, operation_id, charged.api, charged.instance,
            charged.tokens,
        )
    )
    apply_debit(being.state.budget, operation_id, charged)
    return charged


def apply_funding(budget: Budget, operation_id: str, amount: Decimal) -> None:
    """Move funds from the budget to a child (decision 17)."""
    budget.remaining = sub(budget.remaining, amount)
    budget.children_funded = add(budget.children_funded, amount)
    budget.last_operation = operation_id


def revenue_amount(amount: Decimal) -> Decimal:
    """Revenue as the budget holds it: 28 significant digits, then a picodollar like a charge.

    A JSON number arrives as its exact binary value (0.1 is 0.1000000000000000055…); held
    unrounded it would make `earned` and `remaining` round differently, as a charge would.
    """
    return _rounded(MONEY_CONTEXT.plus(amount))


def credit(being: LiveBeing, amount: Decimal, source: str) -> Decimal | None:
    """Journal and apply trusted revenue (spec §8.3); the amount credited, None if nothing.

    The credit is a ledger entry with its own operation id, journaled before the save that
    follows, so a resume applies a credit the saved budget missed exactly once.
    """
    if amount < 0:
        raise StateError("revenue cannot be negative")
    credited = revenue_amount(amount)
    if credited <= 0:
        return None
    operation = new_operation_id()
    event = events.revenue_credited(being.now(), being.state.cycle, credited, source)
    event["operation_id"] = operation
    being.journal(event)
    apply_credit(being.state.budget, operation, credited)
    return credited


def apply_credit(budget: Budget, operation_id: str, amount: Decimal) -> None:
    """Add revenue to `earned` and `remaining` and remember its operation."""
    budget.earned = add(budget.earned, amount)
    budget.remaining = add(budget.remaining, amount)
    budget.last_operation = operation_id


def apply_entry(budget: Budget, event: Event) -> None:
    """Apply one journaled ledger entry (a debit, a funding, a refund, a credit) to the budget."""
    operation = str(event["operation_id"])
    kind = event["type"]
    if kind == "cost_debited":
        apply_debit(budget, operation, _charge_of(event))
    elif kind == "revenue_credited":
        apply_credit(budget, operation, parse_money(event["amount"]))
    elif kind == "child_funded":
        apply_funding(budget, operation, parse_money(event["amount"]))
    elif kind == "child_refunded":
        apply_funding(budget, operation, -parse_money(event["amount"]))


def _charge_of(event: Event) -> Charge:
    return Charge(
        parse_money(event.get("api", event.get("amount"))),
        parse_money(event.get("instance", "0")),
        int(event.get("tokens", 0)),
    )


def unsettled(budget: Budget, journal: list[Event]) -> tuple[list[Event], list[Event]]:
    """Debits the budget has not applied, and reservations with no outcome, after its newest."""
    start = 0
    if budget.last_operation is not None:
        for index, event in enumerate(journal):
            if (
                event.get("type") in LEDGER_ENTRIES
                and event.get("operation_id") == budget.last_operation
            ):
                start = index + 1
        if start == 0:
            # The journal does not hold the budget's newest debit: nothing can be matched safely.
            return [], []
    pending: dict[str, Event] = {}
    missed: list[Event] = []
    for event in journal[start:]:
        kind = event.get("type")
        operation = event.get("operation_id")
        if not isinstance(operation, str):
            continue
        if kind == "cost_reserved":
            pending[operation] = event
        elif kind == "cost_released":
            pending.pop(operation, None)
        elif kind in LEDGER_ENTRIES:
            pending.pop(operation, None)
            missed.append(event)
    return missed, list(pending.values())


def reconcile(being: LiveBeing, journal: list[Event]) -> int:
    """Bring the budget level with the journal at boot; returns how many debits were applied."""
    budget = being.state.budget
    missed, orphans = unsettled(budget, journal)
    for event in missed:
        apply_entry(budget, event)
    for reservation in orphans:
        # The call's outcome is unknown: it may have been billed, so its reservation is charged.
        debit(being, str(reservation["operation_id"]), _charge_of(reservation))
    return len(missed) + len(orphans)
