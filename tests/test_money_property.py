"""Money never goes wrong, whatever the prices, usages, balances and revenue (decisions 15-16).

Hypothesis drives the real cycle (`Runtime.run`) against the scripted gateway over real
HTTP with random prices, starting balances, `max_tokens`, token usages (some beyond
what was reserved), gateway failures and trusted revenue. For every example:

- the gateway is called only after a reservation the balance covered: replaying the
  journal, `remaining` covers every `cost_reserved`, and the gateway received exactly
  one completion request per reservation;
- `remaining >= 0` after every journaled entry and in the saved state;
- starting + earned − api_spent − instance_spent − children_funded == remaining, exactly
  (computed without rounding);
- every operation id is debited at most once, only after its reservation; the ids in
  `cost_debited` events are exactly the debits the budget applied (the sums of their
  parts equal the budget's, its newest entry is the journal's newest), and a resume
  applies nothing more.
"""

from __future__ import annotations

import asyncio
import decimal
import json
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from singularity.config import resolve
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing
from singularity.runtime.lifecycle import Runtime
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from singularity.tools.base import FunctionTool, FunctionToolset, Outcome, ToolDefinition, Toolset
from tests.support.loop_http import all_events, state_of

EXACT = decimal.Context(prec=200, traps=[decimal.Inexact])
PAY = "finance__collect"


async def collect(arguments: dict[str, Any]) -> Outcome:
    """A trusted tool whose raw result carries the revenue the script chose."""
    return Outcome.success({"structuredContent": {"revenue_usd": arguments.get("amount")}})


def finance(being: LiveBeing) -> list[Toolset]:
    definition = ToolDefinition(PAY, "collect revenue", {"type": "object", "properties": {}})
    return [FunctionToolset([FunctionTool(definition, collect)])]


prices = st.decimals(
    min_value=Decimal(0), max_value=Decimal(400), places=3, allow_nan=False, allow_infinity=False
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
    st.integers(-3, 3),
    st.just("not money"),
)


@st.composite
def turns(draw: st.DrawFn) -> Turn:
    kind = draw(st.sampled_from(["text", "tools", "tools", "error", "drop"]))
    if kind == "text":
        return Turn.text("resting", usage=draw(usage))
    if kind == "error":
        return Turn.error(draw(st.sampled_from([429, 500, 503])), "scripted outage")
    if kind == "drop":
        return Turn.drop()
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            calls.append(Call(PAY, json.dumps({"amount": draw(amounts)})))
        else:
            calls.append(Call("singularity_self_add_learning", '{"learning":"costs matter"}'))
    return Turn.tool_calls(*calls, usage=draw(usage))


def replay(events: list[dict[str, Any]], starting: Decimal, reservations: list[Decimal]) -> None:
    """Walk the journal: coverage of every reservation, no negative balance, no double debit."""
    remaining = starting
    reserved: set[str] = set()
    settled: set[str] = set()
    for event in events:
        kind = event["type"]
        if kind == "cost_reserved":
            worst = EXACT.add(Decimal(event["api"]), Decimal(event["instance"]))
            assert remaining >= worst, "the gateway was called on an uncovered reservation"
            assert remaining > 0
            reservations.append(worst)
            assert event["operation_id"] not in reserved
            reserved.add(event["operation_id"])
        elif kind in ("cost_debited", "cost_released"):
            operation = event["operation_id"]
            assert operation in reserved and operation not in settled
            settled.add(operation)
            if kind == "cost_debited":
                api, instance = Decimal(event["api"]), Decimal(event["instance"])
                assert Decimal(event["amount"]) == EXACT.add(api, instance)
                remaining = EXACT.subtract(remaining, EXACT.add(api, instance))
        elif kind == "revenue_credited":
            assert Decimal(event["amount"]) > 0
            assert event["source"] == PAY
            remaining = EXACT.add(remaining, Decimal(event["amount"]))
        assert remaining >= 0
    assert reserved == settled, "a reservation was left without an outcome"


def check_budget(root: Path, starting: Decimal) -> None:
    state = state_of(root)
    budget = state.budget
    events = all_events(root)
    assert budget.remaining >= 0
    total = EXACT.subtract(
        EXACT.subtract(
            EXACT.subtract(EXACT.add(budget.starting, budget.earned), budget.api_spent),
            budget.instance_spent,
        ),
        budget.children_funded,
    )
    assert total == budget.remaining
    assert budget.starting == starting
    debits = [e for e in events if e["type"] == "cost_debited"]
    credits = [e for e in events if e["type"] == "revenue_credited"]
    ids = [e["operation_id"] for e in debits]
    assert len(ids) == len(set(ids))
    api = sum((Decimal(e["api"]) for e in debits), Decimal(0))
    instance = sum((Decimal(e["instance"]) for e in debits), Decimal(0))
    earned = sum((Decimal(e["amount"]) for e in credits), Decimal(0))
    assert (api, instance, earned) == (budget.api_spent, budget.instance_spent, budget.earned)
    assert sum(int(e["tokens"]) for e in debits) == budget.total_tokens
    entries = [e for e in events if e["type"] in ledger.LEDGER_ENTRIES]
    assert budget.last_operation == (entries[-1]["operation_id"] if entries else None)
    assert ledger.unsettled(budget, events) == ([], [])


BINARY_REVENUE = Turn.tool_calls(
    Call(PAY, '{"amount": 0.1}'),
    Call(PAY, '{"amount": "0.0000000000001"}'),
    usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
)
OVERUSE = Turn.text(
    "far more than reserved",
    usage={"prompt_tokens": 5_000_000, "completion_tokens": 6000, "total_tokens": 0},
)


@example(
    input_price=Decimal("0.5"),
    output_price=Decimal(3),
    instance_price=Decimal(3),
    starting=Decimal("10"),
    max_tokens=100,
    script=[BINARY_REVENUE, Turn.text("done")],
    cycles=1,
    rounds=2,
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
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    input_price=prices,
    output_price=prices,
    instance_price=st.sampled_from([Decimal(0), Decimal("0.5"), Decimal(3), Decimal(5000)]),
    starting=st.decimals(min_value=Decimal("0.001"), max_value=Decimal(20), places=4),
    max_tokens=st.integers(1, 4000),
    script=st.lists(turns(), min_size=1, max_size=8),
    cycles=st.integers(1, 4),
    rounds=st.integers(1, 3),
)
def test_money_stays_exact_and_covered(
    input_price: Decimal,
    output_price: Decimal,
    instance_price: Decimal,
    starting: Decimal,
    max_tokens: int,
    script: list[Turn],
    cycles: int,
    rounds: int,
) -> None:
    with tempfile.TemporaryDirectory() as scratch, ScriptedServer(script) as server:
        root = Path(scratch)
        (root / "ws").mkdir()
        flags = {
            "state_dir": str(root / "being"),
            "workspace": str(root / "ws"),
            "brama_url": server.url,
            "cycle_interval_secs": "0",
            "input_price": str(input_price),
            "output_price": str(output_price),
            "instance_price": str(instance_price),
            "starting_balance": str(starting),
            "max_tokens": str(max_tokens),
            "max_tool_rounds": str(rounds),
            "http_timeout_secs": "5",
        }

        async def live(resume: bool, max_cycles: int) -> None:
            values = {**flags, "resume": "true" if resume else "false"}
            runtime = Runtime.boot(resolve(values, environ={}), extra_toolsets=finance)
            try:
                if max_cycles:
                    await runtime.run(max_cycles)
            except Exception:
                pass  # a permanent error ends the run; the money must still be right
            finally:
                await runtime.shutdown()

        asyncio.run(live(False, cycles))
        reservations: list[Decimal] = []
        replay(all_events(root), starting, reservations)
        assert len(server.completions) == len(reservations)
        check_budget(root, starting)
        before = state_of(root).budget
        asyncio.run(live(True, 0))  # a resume applies nothing more
        after = state_of(root).budget
        assert after == before
        check_budget(root, starting)
