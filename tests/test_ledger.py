"""The ledger: prices, reservations, exactly-once debits and credits, reconcile (decision 16).

Contract: before each model call its worst case is journaled as `cost_reserved`; its
outcome is `cost_debited` (same operation id, spec fields `at, cycle, amount`, then
`operation_id, api, instance, tokens`) or `cost_released`; the budget remembers the
newest entry it applied. At boot, `reconcile` applies journaled entries the saved budget
missed, once, and charges reservations that never got an outcome (capped so `remaining`
stays >= 0); a released reservation costs nothing; booting twice changes nothing.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.domain.budget import Budget
from singularity.errors import StateError
from singularity.money import render_money
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing, open_being
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.runtime.loop.lifecycle import Runtime
from tests.support.journal_ahead import close_with_journal_ahead
from tests.support.loop_http import all_events, journal, state_of

PRICES = ledger.Prices(Decimal("2.5"), Decimal(10), Decimal(3))


def flags(root: Path) -> dict[str, object]:
    (root / "ws").mkdir(exist_ok=True)
    return {"state_dir": str(root / "being"), "workspace": str(root / "ws")}


def new_being(root: Path, starting: str = "10") -> LiveBeing:
    settings = resolve({**flags(root), "starting_balance": starting}, environ={})
    being = open_being(settings, resume=False)
    being.state.status = "running"
    being.save()
    return being


def reopen(root: Path) -> LiveBeing:
    return open_being(resolve({**flags(root), "resume": "true"}, environ={}), resume=True)


def boot_and_stop(root: Path) -> None:
    """A whole resume: boot (which reconciles), then shut down."""

    async def go() -> None:
        runtime = Runtime.boot(resolve({**flags(root), "resume": "true"}, environ={}))
        await runtime.shutdown()

    asyncio.run(go())


def ledger_events(root: Path) -> list[dict[str, object]]:
    kinds = ("cost_reserved", "cost_debited", "cost_released", "revenue_credited")
    return [e for e in journal(root) if e["type"] in kinds]


# --- prices ------------------------------------------------------------------------------


def test_price_is_exact() -> None:
    charge = ledger.price(PRICES, 1000, 500, 3_600_000_000_000)
    assert charge == ledger.Charge(Decimal("0.0075"), Decimal(3), 1500)
    assert charge.total == Decimal("3.0075")
    assert ledger.price(ledger.Prices(Decimal(0), Decimal(0), Decimal(0)), 10, 10, 99) == (
        ledger.Charge(Decimal(0), Decimal(0), 20)
    )


def test_a_token_price_keeps_every_decimal_place() -> None:
    seven = ledger.price(ledger.Prices(Decimal("0.3333333"), Decimal(0), Decimal(0)), 7, 0, 0)
    assert render_money(seven.api) == "0.0000023333331"
    one = ledger.price(ledger.Prices(Decimal(0), Decimal("0.0000001"), Decimal(0)), 0, 1, 0)
    assert render_money(one.total) == "0.0000000000001"


def test_an_instance_fraction_is_rounded_up_at_the_28th_place() -> None:
    hourly = ledger.Prices(Decimal(0), Decimal(0), Decimal(1))
    # 10 ms at 1 USD per hour is 1/360_000 USD, a fraction that does not terminate (spec §2).
    assert render_money(ledger.price(hourly, 0, 0, 10_000_000).instance) == (
        "0.0000027777777777777777777778"
    )
    assert render_money(ledger.price(hourly, 0, 0, 1_000_000).instance) == (
        "0.0000002777777777777777777778"
    )
    # Exact results keep their scale; what needs more than 28 places is rounded up, so the
    # smallest amount there is stands for 1 ns at 1e-17 USD per hour (2.7e-30), never zero.
    tiny = ledger.Prices(Decimal(0), Decimal(0), Decimal("0.0000009"))
    assert render_money(ledger.price(tiny, 0, 0, 1_000_000).instance) == "0.00000000000025"
    assert render_money(ledger.price(tiny, 0, 0, 1).instance) == "0.00000000000000000025"
    assert render_money(ledger.price(hourly, 0, 0, 1).instance) == (
        "0.0000000000002777777777777778"
    )
    tinier = ledger.Prices(Decimal(0), Decimal(0), Decimal("0.00000000000000001"))
    assert render_money(ledger.price(tinier, 0, 0, 1).instance) == (
        "0.0000000000000000000000000001"
    )


def test_a_charge_below_the_28th_place_is_never_zero() -> None:
    smallest = ledger.Prices(Decimal("0.0000000000000000000000000001"), Decimal(0), Decimal(0))
    charge = ledger.price(smallest, 1, 0, 0)
    assert render_money(charge.total) == "0.0000000000000000000000000001"


def test_worst_case_prices_the_prompt_estimate_max_tokens_and_the_deadline() -> None:
    reservation = ledger.worst_case(PRICES, 4000, 2048, 120.0)
    assert (render_money(reservation.api), render_money(reservation.instance)) == (
        "0.03048",
        "0.1",
    )
    short = ledger.worst_case(PRICES, 0, 0, 0.1)
    assert render_money(short.instance) == "0.0000833333333333333333333334"


def test_the_deadline_is_what_the_balance_can_pay_for() -> None:
    hourly = ledger.Prices(Decimal(0), Decimal(0), Decimal(3600))  # 1 USD a second
    budget = Budget.fresh(Decimal(10))
    assert ledger.affordable_deadline(hourly, budget, Decimal(0), 120.0) == 10.0
    assert ledger.affordable_deadline(hourly, budget, Decimal("2.5"), 120.0) == 7.5
    assert ledger.affordable_deadline(hourly, budget, Decimal("9.9999"), 120.0) == 0.0
    assert ledger.affordable_deadline(hourly, budget, Decimal(0), 4.0) == 4.0
    assert ledger.affordable_deadline(PRICES, budget, Decimal(0), 120.0) == 120.0


def test_can_cover_needs_solvency_and_the_whole_reservation() -> None:
    budget = Budget.fresh(Decimal(1))
    assert ledger.can_cover(budget, ledger.Charge(Decimal("0.6"), Decimal("0.4")))
    assert not ledger.can_cover(budget, ledger.Charge(Decimal("0.6"), Decimal("0.41")))
    budget.remaining = Decimal(0)
    assert not ledger.can_cover(budget, ledger.Charge(Decimal(0), Decimal(0)))


def test_a_debit_is_capped_so_remaining_never_goes_negative(tmp_path: Path) -> None:
    being = new_being(tmp_path, starting="0.5")
    try:
        charged = ledger.debit(being, "op-1", ledger.Charge(Decimal("0.4"), Decimal("0.3"), 7))
        budget = being.state.budget
        assert charged == ledger.Charge(Decimal("0.4"), Decimal("0.1"), 7)
        assert budget.remaining == 0
        assert (budget.api_spent, budget.instance_spent) == (Decimal("0.4"), Decimal("0.1"))
        assert budget.last_operation == "op-1"
        being.save()
    finally:
        being.close()
    [event] = journal(tmp_path)
    assert event == {
        "type": "cost_debited",
        "at": event["at"],
        "cycle": 0,
        "amount": "0.5",
        "operation_id": "op-1",
        "api": "0.4",
        "instance": "0.1",
        "tokens": 7,
    }


def test_revenue_cannot_be_negative(tmp_path: Path) -> None:
    being = new_being(tmp_path)
    try:
        with pytest.raises(StateError, match="revenue cannot be negative"):
            ledger.credit(being, Decimal("-1"), "finance__x")
        assert ledger.credit(being, Decimal(0), "finance__x") is None
        assert being.state.budget.earned == 0
        assert ledger.credit(being, Decimal("1e-13"), "finance__x") == Decimal("1e-13")
        assert render_money(being.state.budget.remaining) == "10.0000000000001"
        being.save()
    finally:
        being.close()
    assert [e["amount"] for e in journal(tmp_path)] == ["0.0000000000001"]


# --- reconcile at boot -----------------------------------------------------------------


def test_a_debit_the_saved_budget_missed_is_applied_once_at_boot(tmp_path: Path) -> None:
    being = new_being(tmp_path)
    charge = ledger.Charge(Decimal("0.25"), Decimal("0.125"), 42)
    ledger.reserve(being, "op-a", ledger.Charge(Decimal(1), Decimal(1)))
    ledger.debit(being, "op-a", charge)
    close_with_journal_ahead(being)  # journaled, not saved
    assert state_of(tmp_path).budget.remaining == Decimal(10)
    before = ledger_events(tmp_path)
    boot_and_stop(tmp_path)
    budget = state_of(tmp_path).budget
    assert budget.remaining == Decimal("9.625")
    assert (budget.api_spent, budget.instance_spent) == (Decimal("0.25"), Decimal("0.125"))
    assert budget.total_tokens == 42
    assert budget.last_operation == "op-a"
    assert ledger_events(tmp_path) == before  # applied, not debited again
    boot_and_stop(tmp_path)
    assert state_of(tmp_path).budget == budget
    assert ledger_events(tmp_path) == before


def test_an_orphan_reservation_is_charged_once(tmp_path: Path) -> None:
    being = new_being(tmp_path, starting="2")
    ledger.reserve(being, "op-b", ledger.Charge(Decimal("0.5"), Decimal("0.25")))
    being.save()  # the reservation is durable before the call
    being.close()  # the call's outcome never reached the journal
    boot_and_stop(tmp_path)
    budget = state_of(tmp_path).budget
    assert budget.remaining == Decimal("1.25")
    assert (budget.api_spent, budget.instance_spent) == (Decimal("0.5"), Decimal("0.25"))
    assert budget.last_operation == "op-b"
    events = ledger_events(tmp_path)
    assert [(e["type"], e["operation_id"]) for e in events] == [
        ("cost_reserved", "op-b"),
        ("cost_debited", "op-b"),
    ]
    assert events[1]["amount"] == "0.75"
    boot_and_stop(tmp_path)
    assert state_of(tmp_path).budget == budget
    assert ledger_events(tmp_path) == events


def test_an_orphan_reservation_beyond_the_balance_is_capped(tmp_path: Path) -> None:
    being = new_being(tmp_path, starting="0.3")
    ledger.reserve(being, "op-c", ledger.Charge(Decimal("0.5"), Decimal("0.25")))
    being.save()
    being.close()
    boot_and_stop(tmp_path)
    state = state_of(tmp_path)
    assert state.budget.remaining == 0
    assert state.budget.api_spent + state.budget.instance_spent == Decimal("0.3")
    assert state.status == "exhausted"


def test_a_released_reservation_is_not_charged(tmp_path: Path) -> None:
    being = new_being(tmp_path)
    ledger.reserve(being, "op-d", ledger.Charge(Decimal(1), Decimal(1)))
    being.save()
    ledger.release(being, "op-d")
    being.save()
    being.close()
    boot_and_stop(tmp_path)
    budget = state_of(tmp_path).budget
    assert budget == Budget.fresh(Decimal(10))
    assert [e["type"] for e in ledger_events(tmp_path)] == ["cost_reserved", "cost_released"]


def test_missed_entries_and_an_orphan_are_settled_in_journal_order(tmp_path: Path) -> None:
    being = new_being(tmp_path)
    ledger.reserve(being, "op-1", ledger.Charge(Decimal(1), Decimal(0)))
    ledger.debit(being, "op-1", ledger.Charge(Decimal("0.1"), Decimal(0), 1))
    being.checkpoint()  # op-1 is in the saved budget
    ledger.reserve(being, "op-2", ledger.Charge(Decimal(1), Decimal(0)))
    ledger.debit(being, "op-2", ledger.Charge(Decimal("0.2"), Decimal(0), 2))
    ledger.credit(being, Decimal("0.05"), "finance__settle")
    ledger.reserve(being, "op-3", ledger.Charge(Decimal("0.3"), Decimal(0)))
    close_with_journal_ahead(being)
    boot_and_stop(tmp_path)
    budget = state_of(tmp_path).budget
    assert budget.api_spent == Decimal("0.6")
    assert budget.earned == Decimal("0.05")
    assert budget.remaining == Decimal("9.45")
    assert budget.total_tokens == 3
    assert budget.last_operation == "op-3"
    debited = [e["operation_id"] for e in ledger_events(tmp_path) if e["type"] == "cost_debited"]
    assert debited == ["op-1", "op-2", "op-3"]
    boot_and_stop(tmp_path)
    assert state_of(tmp_path).budget == budget


def test_a_credit_the_saved_budget_missed_is_applied_once(tmp_path: Path) -> None:
    being = new_being(tmp_path)
    ledger.credit(being, Decimal("1.5"), "finance__settle")
    close_with_journal_ahead(being)
    boot_and_stop(tmp_path)
    budget = state_of(tmp_path).budget
    assert (budget.earned, budget.remaining) == (Decimal("1.5"), Decimal("11.5"))
    boot_and_stop(tmp_path)
    assert state_of(tmp_path).budget == budget
    assert [e["type"] for e in ledger_events(tmp_path)] == ["revenue_credited"]


def test_nothing_is_applied_when_the_journal_lacks_the_budgets_newest_entry(
    tmp_path: Path,
) -> None:
    being = new_being(tmp_path)
    being.state.budget.last_operation = "op-unknown"
    ledger.reserve(being, "op-e", ledger.Charge(Decimal(1), Decimal(0)))
    ledger.debit(being, "op-e", ledger.Charge(Decimal(1), Decimal(0)))
    being.save()
    journaled = [dict(e) for e in journal(tmp_path)]
    assert [e["operation_id"] for e in journaled] == ["op-e", "op-e"]
    being.state.budget = Budget.fresh(Decimal(10))
    being.state.budget.last_operation = "op-unknown"
    assert ledger.unsettled(being.state.budget, journaled) == ([], [])
    assert ledger.reconcile(being, journaled) == 0
    being.close()


def test_unsettled_lists_what_a_boot_would_apply(tmp_path: Path) -> None:
    being = new_being(tmp_path)
    ledger.reserve(being, "op-1", ledger.Charge(Decimal(1), Decimal(0)))
    ledger.debit(being, "op-1", ledger.Charge(Decimal("0.5"), Decimal(0)))
    ledger.reserve(being, "op-2", ledger.Charge(Decimal(1), Decimal(0)))
    ledger.reserve(being, "op-3", ledger.Charge(Decimal(1), Decimal(0)))
    ledger.release(being, "op-3")
    close_with_journal_ahead(being)
    missed, orphans = ledger.unsettled(state_of(tmp_path).budget, journal(tmp_path))
    assert [e["operation_id"] for e in missed] == ["op-1"]
    assert [e["operation_id"] for e in orphans] == ["op-2"]


def test_reopening_without_boot_leaves_the_budget_alone(tmp_path: Path) -> None:
    being = new_being(tmp_path)
    ledger.reserve(being, "op-f", ledger.Charge(Decimal(1), Decimal(0)))
    being.save()
    being.close()
    again = reopen(tmp_path)
    try:
        assert again.state.budget == Budget.fresh(Decimal(10))
    finally:
        again.close()


# --- operator credits ----------------------------------------------------------------------


def test_an_operator_credit_raises_the_balance_but_is_not_revenue(tmp_path: Path) -> None:
    being = new_being(tmp_path)
    ledger.operator_credit(being, Decimal("0.0000000000000000000000000001"), "req-1", "top-up")
    close_with_journal_ahead(being)  # journaled, not saved: the next boot applies it once
    [event] = all_events(tmp_path)
    assert (event["type"], event["amount"]) == (
        "operator_credited",
        "0.0000000000000000000000000001",
    )
    boot_and_stop(tmp_path)
    boot_and_stop(tmp_path)
    budget = state_of(tmp_path).budget
    assert render_money(budget.remaining) == "10.0000000000000000000000000001"
    assert (budget.earned, budget.operator_credited) == (
        Decimal(0),
        Decimal("0.0000000000000000000000000001"),
    )
    assert budget.last_operation == event["operation_id"]
    assert verify_state_dir(str(tmp_path / "being")) == []


def test_an_operator_credit_keeps_the_money_in_range(tmp_path: Path) -> None:
    being = new_being(tmp_path, starting="79228162514264337593543950330")
    try:
        with pytest.raises(StateError, match="must keep the balance at most 7922816251426433759"):
            ledger.operator_credit(being, Decimal(6), "req-1", "too much")
        ledger.operator_credit(being, Decimal(5), "req-2", "exactly to the top")
        assert render_money(being.state.budget.remaining) == "79228162514264337593543950335"
    finally:
        being.close()
