"""Money is exact and never overspent, whatever the prices, usages, balances and revenue.

Hypothesis drives the real cycle (`Runtime.run`) against the scripted gateway over real
HTTP with random prices and starting balances of up to 28 decimal places (most of them
finer than 12 places), `max_tokens`, token usages (some beyond what was reserved),
gateway failures and calls whose outcome is unknown, trusted revenue (decimal strings
and binary numbers, some outside the money range) and funded children. For every
example:

- the gateway is called only after a reservation the balance covered, once per
  reservation, and every reservation gets exactly one outcome;
- `remaining >= 0` after every journaled entry and in the saved state;
- every debit is exactly what the test computes from the prices and the reported usage
  (rounded up at the 28th place, never to zero), or the whole reservation of a call whose
  outcome is unknown, or what was left when the balance could not pay more;
- the journal's debits, credits and grants sum exactly to the budget's fields, and
  `starting + earned - api_spent - instance_spent - children_funded == remaining` with
  no rounding at all; a resume applies nothing twice.

The lives together must go through each state that matters (`COVERED`): charges
beyond the 12th place and below a picodollar, credits beyond the 12th place, revenue
refused for its range, a call paid for an unknown outcome, a released reservation, a
debit capped by the balance, a funded child, an exhausted being and a solvent one.
"""

from __future__ import annotations

import asyncio
import decimal
import json
import math
import tempfile
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from singularity.config import resolve
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing
from singularity.runtime.family import children
from singularity.runtime.loop.lifecycle import Runtime
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from singularity.tools.base import FunctionTool, FunctionToolset, Outcome, ToolDefinition, Toolset
from tests.support.loop_http import all_events, state_of
from tests.support.reached import Reached

EXACT = decimal.Context(prec=400, traps=[decimal.Inexact])
PAY = "finance__collect"
SPAWN = "singularity_spawn_child"
PLACES = 28
# What the generated lives must go through, together.
COVERED = (
    "charge beyond 12 places",
    "charge below a picodollar",
    "credit beyond 12 places",
    "revenue refused for its range",
    "paid an unknown outcome",
    "released",
    "capped",
    "child funded",
    "exhausted",
    "solvent",
)


async def collect(arguments: dict[str, Any]) -> Outcome:
    """A trusted tool whose raw result carries the revenue the script chose."""
    return Outcome.success({"structuredContent": {"revenue_usd": arguments.get("amount")}})


def finance(being: LiveBeing) -> list[Toolset]:
    definition = ToolDefinition(PAY, "collect revenue", {"type": "object", "properties": {}})
    return [FunctionToolset([FunctionTool(definition, collect)])]


def fine(places: tuple[int, int], digits: int = 9) -> st.SearchStrategy[Decimal]:
    """Decimals with a number of places in `places` and up to `digits` significant digits."""
    return st.builds(
        lambda n, p: Decimal((0, tuple(int(d) for d in str(n)), -p)),
        st.integers(1, 10**digits),
        st.integers(*places),
    )


prices = st.one_of(
    st.just(Decimal(0)),
    st.decimals(min_value=0, max_value=400, places=3, allow_nan=False, allow_infinity=False),
    fine((13, 28)),
    st.just(Decimal("0.3333333")),
)
instance_prices = st.one_of(
    st.sampled_from([Decimal(0), Decimal("0.5"), Decimal(3), Decimal(5000)]),
    fine((13, 28)),
)
coarse_balances = st.decimals(min_value=Decimal("0.001"), max_value=Decimal(20), places=4)
balances = st.one_of(
    coarse_balances,
    st.builds(EXACT.add, coarse_balances, fine((13, 28), digits=6)),
)
usage = st.builds(
    lambda p, c, reported: {
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": p + c if reported else 0,
    },
    # Some usages go far beyond what was reserved: the debit is then capped.
    st.one_of(st.integers(0, 30_000), st.integers(100_000, 5_000_000)),
    st.integers(0, 6_000),
    st.booleans(),
)
amounts = st.one_of(
    st.floats(min_value=-5, max_value=5, allow_nan=False, allow_infinity=False),
    st.decimals(min_value=-5, max_value=5, places=6, allow_nan=False).map(str),
    fine((13, 28)).map(str),
    st.sampled_from([1e61, "1e61", 1e-30, "79228162514264337593543950336"]),
    st.integers(-3, 3),
    st.just("not money"),
)
grants = st.one_of(st.none(), fine((0, 28), digits=6).map(lambda d: format(d, "f")))


@st.composite
def turns(draw: st.DrawFn) -> Turn:
    kind = draw(st.sampled_from(["text", "tools", "tools", "error", "drop"]))
    if kind == "text":
        return Turn.text("resting", usage=draw(usage))
    if kind == "error":
        return Turn.error(draw(st.sampled_from([429, 500, 503])), "scripted outage")
    if kind == "drop":
        return Turn.drop()  # the request was read: its outcome is unknown
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        choice = draw(st.sampled_from(["pay", "pay", "learn", "spawn"]))
        if choice == "pay":
            calls.append(Call(PAY, json.dumps({"amount": draw(amounts)})))
        elif choice == "spawn":
            budget = draw(grants)
            arguments = {"name": "Kid", "ticker": "KID", "specialty": "testing"}
            calls.append(
                Call(SPAWN, json.dumps(arguments | ({"budget": budget} if budget else {})))
            )
        else:
            calls.append(Call("singularity_self_add_learning", '{"learning":"costs matter"}'))
    return Turn.tool_calls(*calls, usage=draw(usage))


def exact(value: Any) -> Decimal:
    return Decimal(str(value))


def places(value: Decimal) -> int:
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    return max(0, -exponent)


def ceiling(value: Fraction) -> Decimal:
    """`value` rounded up at the 28th place, written as a decimal, computed independently."""
    units = math.ceil(value * 10**PLACES)
    return EXACT.divide(Decimal(units), Decimal(10**PLACES))


def expected_api(in_price: Decimal, out_price: Decimal, usage: dict[str, int]) -> Decimal:
    cost = (
        Fraction(usage["prompt_tokens"]) * Fraction(in_price)
        + Fraction(usage["completion_tokens"]) * Fraction(out_price)
    ) / 1_000_000
    return ceiling(cost)


def replay(
    events: list[dict[str, Any]],
    starting: Decimal,
    in_price: Decimal,
    out_price: Decimal,
    instance_price: Decimal,
    reached: Reached,
) -> int:
    """Walk the journal: coverage, exact debits, no negative balance, no double debit."""
    remaining = starting
    reserved: dict[str, tuple[Decimal, Decimal]] = {}
    settled: set[str] = set()
    usage: dict[str, int] | None = None
    for event in events:
        kind = event["type"]
        if kind == "model_completed":
            usage = event["usage"]
        elif kind == "cost_reserved":
            api, instance = exact(event["api"]), exact(event["instance"])
            assert remaining > 0 and remaining >= EXACT.add(api, instance), "uncovered call"
            assert event["operation_id"] not in reserved
            reserved[event["operation_id"]] = (api, instance)
        elif kind in ("cost_debited", "cost_released"):
            operation = event["operation_id"]
            assert operation in reserved and operation not in settled
            settled.add(operation)
            if kind == "cost_released":
                reached.note("released")
            if kind == "cost_debited":
                api, instance = exact(event["api"]), exact(event["instance"])
                assert exact(event["amount"]) == EXACT.add(api, instance)
                capped = EXACT.add(api, instance) == remaining
                if capped:
                    reached.note("capped")
                if usage is None:  # the outcome is unknown: the reservation is paid
                    assert (api, instance) == reserved[operation] or capped
                    reached.note("paid an unknown outcome")
                else:
                    want = expected_api(in_price, out_price, usage)
                    assert api == want or (capped and api <= want)
                    if want > 0:
                        assert api > 0, "a non-zero charge was recorded as zero"
                    if instance_price > 0 and not (capped and api == remaining):
                        assert instance > 0, "a non-zero instance charge was recorded as zero"
                for part in (api, instance):
                    if places(part) > 12:
                        reached.note("charge beyond 12 places")
                    if 0 < part < Decimal("1e-12"):
                        reached.note("charge below a picodollar")
                remaining = EXACT.subtract(remaining, EXACT.add(api, instance))
            usage = None
        elif kind == "revenue_credited":
            amount = exact(event["amount"])
            assert amount > 0 and event["source"] == PAY
            if places(amount) > 12:
                reached.note("credit beyond 12 places")
            remaining = EXACT.add(remaining, amount)
        elif kind == "child_funded":
            reached.note("child funded")
            remaining = EXACT.subtract(remaining, exact(event["amount"]))
        elif kind == "child_refunded":
            remaining = EXACT.add(remaining, exact(event["amount"]))
        elif kind == "warning" and "outside the money range" in event["message"]:
            reached.note("revenue refused for its range")
        assert remaining >= 0
    assert set(reserved) == settled, "a reservation was left without an outcome"
    return len(reserved)


def check_budget(root: Path, starting: Decimal) -> None:
    budget = state_of(root).budget
    events = all_events(root)
    assert budget.remaining >= 0 and budget.starting == starting
    total = EXACT.subtract(EXACT.add(budget.starting, budget.earned), budget.api_spent)
    total = EXACT.subtract(EXACT.subtract(total, budget.instance_spent), budget.children_funded)
    assert total == budget.remaining

    def summed(kind: str, key: str) -> Decimal:
        total = Decimal(0)
        for event in events:
            if event["type"] == kind:
                total = EXACT.add(total, exact(event[key]))
        return total

    assert summed("cost_debited", "api") == budget.api_spent
    assert summed("cost_debited", "instance") == budget.instance_spent
    assert summed("revenue_credited", "amount") == budget.earned
    given = EXACT.subtract(summed("child_funded", "amount"), summed("child_refunded", "amount"))
    assert given == budget.children_funded
    debits = [e for e in events if e["type"] == "cost_debited"]
    assert len({e["operation_id"] for e in debits}) == len(debits)
    assert sum(int(e["tokens"]) for e in debits) == budget.total_tokens
    entries = [e for e in events if e["type"] in ledger.LEDGER_ENTRIES]
    assert budget.last_operation == (entries[-1]["operation_id"] if entries else None)
    assert ledger.unsettled(budget, events) == ([], [])


BINARY_REVENUE = Turn.tool_calls(
    Call(PAY, '{"amount": 0.1}'),
    Call(PAY, '{"amount": "0.0000000000001"}'),
    Call(PAY, '{"amount": 1e61}'),
    usage={"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
)
FUNDED = Turn.tool_calls(
    Call(
        SPAWN, '{"name":"Kid","ticker":"KID","specialty":"x","budget":"0.0000000000000000000001"}'
    ),
    usage={"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1},
)
OVERUSE = Turn.text(
    "far more than reserved",
    usage={"prompt_tokens": 5_000_000, "completion_tokens": 6000, "total_tokens": 0},
)


def live_example(
    input_price: Decimal,
    output_price: Decimal,
    instance_price: Decimal,
    starting: Decimal,
    max_tokens: int,
    script: list[Turn],
    cycles: int,
    rounds: int,
    reached: Reached,
) -> None:
    with (
        tempfile.TemporaryDirectory() as scratch,
        ScriptedServer(script) as server,
        mock.patch.object(children, "child_command", lambda: ["/bin/true"]),
    ):
        root = Path(scratch)
        (root / "ws").mkdir()
        flags = {
            "state_dir": str(root / "being"),
            "workspace": str(root / "ws"),
            "brama_url": server.url,
            "cycle_interval_secs": "0",
            "input_price": format(input_price, "f"),
            "output_price": format(output_price, "f"),
            "instance_price": format(instance_price, "f"),
            "starting_balance": format(starting, "f"),
            "max_tokens": str(max_tokens),
            "max_tool_rounds": str(rounds),
            "http_timeout_secs": "5",
        }

        async def live(resume: bool, max_cycles: int) -> None:
            values = {**flags, "resume": "true" if resume else "false"}
            runtime = Runtime.boot(
                resolve(values, environ={}), extra_toolsets=finance, extensions=lambda b: []
            )
            # Every scripted failure is transient or indeterminate: `run` must not raise.
            try:
                if max_cycles:
                    await runtime.run(max_cycles)
            finally:
                await runtime.shutdown()

        asyncio.run(live(False, cycles))
        events = all_events(root)
        calls = replay(events, starting, input_price, output_price, instance_price, reached)
        assert len(server.completions) == calls
        check_budget(root, starting)
        reached.note("exhausted" if state_of(root).status == "exhausted" else "solvent")
        asyncio.run(live(True, 0))  # a resume applies nothing twice (unclaimed grants return)
        replay(all_events(root), starting, input_price, output_price, instance_price, reached)
        check_budget(root, starting)


def test_money_is_exact_and_covered() -> None:
    reached = Reached(*COVERED)

    @example(
        input_price=Decimal("0.3333333"),
        output_price=Decimal("0.0000001"),
        instance_price=Decimal("0.0000000000000000000000003"),
        starting=Decimal("10"),
        max_tokens=100,
        script=[BINARY_REVENUE, FUNDED, Turn.drop(), Turn.text("done")],
        cycles=2,
        rounds=3,
    )
    @example(
        input_price=Decimal(2),
        output_price=Decimal(1),
        instance_price=Decimal(0),
        starting=Decimal("0.5"),
        max_tokens=10,
        script=[OVERUSE],
        cycles=2,
        rounds=1,
    )
    @example(  # a balance of 1e16 USD keeps every tiny debit (28-digit rounding lost them)
        input_price=Decimal("0.0000000000001"),
        output_price=Decimal(0),
        instance_price=Decimal(0),
        starting=Decimal(10**16),
        max_tokens=10,
        script=[
            Turn.text("a", usage={"prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3})
        ],
        cycles=1,
        rounds=1,
    )
    @example(  # the top of the money range
        input_price=Decimal("0.0000000000000000000000000001"),
        output_price=Decimal(0),
        instance_price=Decimal(0),
        starting=Decimal(2**96 - 1),
        max_tokens=10,
        script=[
            Turn.text("a", usage={"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1})
        ],
        cycles=1,
        rounds=1,
    )
    @settings(max_examples=20, suppress_health_check=[HealthCheck.data_too_large])
    @given(
        input_price=prices,
        output_price=prices,
        instance_price=instance_prices,
        starting=balances,
        max_tokens=st.integers(1, 4000),
        script=st.lists(turns(), min_size=1, max_size=6),
        cycles=st.integers(1, 3),
        rounds=st.integers(1, 3),
    )
    def one_life(**life: Any) -> None:
        live_example(**life, reached=reached)

    one_life()
    reached.assert_all()  # the lives went through every situation the contract speaks of
