"""Revenue credited only from trusted evidence (spec §8.3, §5.5; decision 15).

Contract: after a tool call whose name starts with `finance__` or `trading__`, the raw
result (before the output boundary) is searched depth-first, objects in sorted-key order
and arrays in order, for the first parsable `revenue_usd`, then the first parsable
`realized_profit_usd`; the first of the two that is strictly positive is credited to
`earned` and `remaining` once and journaled `revenue_credited` (`at, cycle, amount,
source`). Strings are decimals, JSON numbers are converted exactly from their binary
value; JSON inside text is not searched; other tools never earn; the credit happens
even when the boundary rejected the model-visible copy.
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.money import render_money
from singularity.runtime.being import LiveBeing
from singularity.runtime.loop.revenue import find_revenue, trusted_revenue
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from singularity.tools.base import (
    FunctionTool,
    FunctionToolset,
    Outcome,
    ToolDefinition,
    Toolset,
)
from tests.support.loop_http import boot, journal, run, state_of

REJECTED = '{"error_code":"sensitive_output_rejected","status":"failed"}'


def toolset(results: dict[str, Any]) -> Callable[[LiveBeing], list[Toolset]]:
    """Tools named after the keys of `results`, each returning its value as raw content."""

    def make(name: str, content: Any) -> FunctionTool:
        async def handler(arguments: dict[str, Any]) -> Outcome:
            return Outcome.success(content)

        schema = {"type": "object", "properties": {}}
        return FunctionTool(ToolDefinition(name, f"test tool {name}", schema), handler)

    def build(being: LiveBeing) -> list[Toolset]:
        return [FunctionToolset([make(name, content) for name, content in results.items()])]

    return build


def live(root: Path, results: dict[str, Any], calls: list[str], **extra: object) -> None:
    script = [Turn.tool_calls(*(Call(name, "{}") for name in calls)), Turn.text("done")]
    with ScriptedServer(script) as server:

        async def go() -> None:
            runtime = boot(root, server, extra_toolsets=toolset(results), **extra)
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()

        run(go())


def credits(root: Path) -> list[dict[str, Any]]:
    return [e for e in journal(root) if e["type"] == "revenue_credited"]


# --- the search, as a pure function -------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "amount"),
    [
        ({"revenue_usd": "2.50"}, Decimal("2.50")),
        ({"revenue_usd": 3}, Decimal(3)),
        ({"structuredContent": {"receipt": {"revenue_usd": "0.0001"}}}, Decimal("0.0001")),
        # Objects are searched in sorted-key order, depth first: "a" before "revenue_usd".
        ({"revenue_usd": "5", "a": {"revenue_usd": "7"}}, Decimal(7)),
        ({"b": {"revenue_usd": "1"}, "a": [{"x": {"revenue_usd": "2"}}]}, Decimal(2)),
        # Arrays in order.
        ({"items": [{"revenue_usd": "4"}, {"revenue_usd": "9"}]}, Decimal(4)),
        # Unparsable occurrences are skipped.
        ({"a": {"revenue_usd": "lots"}, "b": {"revenue_usd": "3"}}, Decimal(3)),
        ({"a": {"revenue_usd": None}, "b": {"revenue_usd": True}, "c": {"revenue_usd": 6}}, 6),
        # The first parsable revenue is not positive: realized profit is taken.
        ({"revenue_usd": "-1", "realized_profit_usd": "1.25"}, Decimal("1.25")),
        ({"revenue_usd": "0", "z": {"realized_profit_usd": 2}}, Decimal(2)),
        # Revenue wins over realized profit when both are positive.
        ({"realized_profit_usd": "8", "revenue_usd": "1"}, Decimal(1)),
        # The first parsable revenue decides, even when a later one is positive.
        ({"a": {"revenue_usd": "-3"}, "b": {"revenue_usd": "10"}}, None),
        ({"revenue_usd": "0"}, None),
        ({"revenue_usd": "-0.5"}, None),
        ({"revenue_usd": "NaN"}, None),
        ({"revenue_usd": "Infinity"}, None),
        # JSON embedded in text is not searched.
        ({"text": '{"revenue_usd": "5"}'}, None),
        ('{"revenue_usd": "5"}', None),
        ({"profit_usd": "5", "revenue": "5"}, None),
    ],
)
def test_the_search_for_trusted_revenue(raw: Any, amount: Decimal | None) -> None:
    assert trusted_revenue("finance__settle", raw) == amount
    assert trusted_revenue("trading__close", raw) == amount


def test_json_numbers_are_converted_exactly_from_binary() -> None:
    # The exact binary value, to the 28th decimal place of the money range.
    found = trusted_revenue("finance__x", json.loads('{"revenue_usd": 0.1}'))
    assert found is not None and render_money(found) == "0.1000000000000000055511151231"
    found = trusted_revenue("finance__x", {"revenue_usd": 1e-7})
    assert found is not None and render_money(found) == "0.0000000999999999999999954748"
    found = trusted_revenue("finance__x", {"revenue_usd": 2.5})
    assert found is not None and render_money(found) == "2.5"


@pytest.mark.parametrize(
    ("raw", "amount", "out_of_range"),
    [
        ({"revenue_usd": 1e61}, None, ["revenue_usd"]),
        ({"revenue_usd": "1" + "0" * 61}, None, ["revenue_usd"]),
        ({"revenue_usd": "79228162514264337593543950336"}, None, ["revenue_usd"]),
        ({"revenue_usd": 1e-30}, None, ["revenue_usd"]),
        ({"revenue_usd": "0.00000000000000000000000000001"}, None, ["revenue_usd"]),
        # Out of range does not parse, as in the original: the search goes on.
        ({"revenue_usd": 1e61, "realized_profit_usd": "3"}, Decimal(3), ["revenue_usd"]),
        ({"a": {"revenue_usd": 1e300}, "b": {"revenue_usd": "2"}}, Decimal(2), ["revenue_usd"]),
        ({"revenue_usd": "79228162514264337593543950335"}, Decimal(2**96 - 1), []),
    ],
)
def test_amounts_outside_the_money_range_are_noted_and_skipped(
    raw: Any, amount: Decimal | None, out_of_range: list[str]
) -> None:
    found = find_revenue("finance__x", raw)
    assert (found.amount, found.out_of_range) == (amount, out_of_range)


@pytest.mark.parametrize("tool", ["finance", "financial__settle", "shop__sell", "x_finance__a"])
def test_untrusted_tools_never_earn(tool: str) -> None:
    assert trusted_revenue(tool, {"revenue_usd": "100"}) is None


# --- crediting in a living being ---------------------------------------------------------


def test_a_trusted_result_is_credited_once_and_journaled(tmp_path: Path) -> None:
    results = {"finance__settle": {"structuredContent": {"revenue_usd": "2.5"}, "isError": False}}
    live(tmp_path, results, ["finance__settle"], input_price="1")
    [credit] = credits(tmp_path)
    assert credit == {
        "type": "revenue_credited",
        "at": credit["at"],
        "cycle": 1,
        "amount": "2.5",
        "source": "finance__settle",
    } | ({"operation_id": credit["operation_id"]} if "operation_id" in credit else {})
    assert list(credit)[:5] == ["type", "at", "cycle", "amount", "source"]
    events = journal(tmp_path)
    kinds = [e["type"] for e in events]
    assert kinds.index("tool_finished") + 1 == kinds.index("revenue_credited")
    budget = state_of(tmp_path).budget
    assert budget.earned == Decimal("2.5")
    spent = budget.api_spent + budget.instance_spent
    assert budget.remaining == Decimal(10) + Decimal("2.5") - spent


def test_untrusted_negative_and_zero_results_are_never_credited(tmp_path: Path) -> None:
    results = {
        "shop__sell": {"revenue_usd": "100"},
        "finance__refund": {"revenue_usd": "-5", "realized_profit_usd": "-1"},
        "trading__flat": {"revenue_usd": 0, "realized_profit_usd": "0.00"},
        "finance__text": {"note": '{"revenue_usd": 9}'},
    }
    live(tmp_path, results, list(results))
    assert credits(tmp_path) == []
    state = state_of(tmp_path)
    assert state.budget.earned == 0
    assert state.budget.remaining == Decimal(10)
    assert [a.tool for a in state.recent_actions] == list(results)


@pytest.mark.parametrize("mode", ["strict", "redact"])
def test_credit_happens_even_when_the_boundary_rejects_the_visible_copy(
    tmp_path: Path, mode: str
) -> None:
    results = {"finance__settle": {"revenue_usd": "1.75", "receipt": "/var/lib/finance/r1"}}
    live(tmp_path, results, ["finance__settle"], output_boundary=mode)
    state = state_of(tmp_path)
    [message] = [m for m in state.conversation if m["role"] == "tool"]
    if mode == "strict":
        assert message["content"] == REJECTED
    else:
        visible = json.loads(message["content"])["content"]
        assert visible == {"receipt": "<redacted: local path>", "revenue_usd": "1.75"}
    assert state.recent_actions[-1].status == "success"
    assert [c["amount"] for c in credits(tmp_path)] == ["1.75"]
    assert state.budget.earned == Decimal("1.75")


def test_each_trusted_call_credits_once(tmp_path: Path) -> None:
    results = {"finance__a": {"revenue_usd": "1"}, "trading__b": {"realized_profit_usd": "0.25"}}
    live(tmp_path, results, ["finance__a", "trading__b", "finance__a"])
    assert [(c["source"], c["amount"]) for c in credits(tmp_path)] == [
        ("finance__a", "1"),
        ("trading__b", "0.25"),
        ("finance__a", "1"),
    ]
    budget = state_of(tmp_path).budget
    assert budget.earned == Decimal("2.25")
    assert budget.remaining == Decimal("12.25")


def test_a_binary_number_is_credited_as_the_ledger_holds_it(tmp_path: Path) -> None:
    results = {"finance__settle": {"revenue_usd": 0.1}}
    live(tmp_path, results, ["finance__settle"], instance_price="3")
    [credit] = credits(tmp_path)
    budget = state_of(tmp_path).budget
    # The amount journaled is exactly the amount the budget gained.
    assert credit["amount"] == "0.1000000000000000055511151231"
    assert Decimal(credit["amount"]) == budget.earned
    with decimal.localcontext(prec=200, traps=[decimal.Inexact]):
        assert budget.starting + budget.earned - budget.api_spent - budget.instance_spent == (
            budget.remaining
        )
