"""Exact money through the CLI, against the scripted gateway over real HTTP.

Contract (spec §2, §8.2, §8.3; one money range): a charge keeps every decimal place its
prices produce (rounded up only beyond the 28th), in the debit, the budget, the cycle
report, the framing message and the journal, and a cost that is not zero is never
recorded as zero; revenue keeps its exact value; an amount is at most 2^96 - 1 USD with
at most 28 places, enforced where money enters (configuration, revenue, a child's
grant, the state file), and within that range every balance, from 1e-28 to 2^96 - 1 USD,
keeps every debit. Every expected value below is written out by hand.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from singularity.tools.base import FunctionTool, FunctionToolset, Outcome, ToolDefinition
from tests.support.loop_http import Result, all_events, boot, cli_args, state_of


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": 0}


def events_of(root: Path, kind: str) -> list[dict[str, Any]]:
    return [event for event in all_events(root) if event["type"] == kind]


def saved_budget(root: Path) -> dict[str, Any]:
    document = json.loads((root / "being" / "state.json").read_text("utf-8"))
    budget: dict[str, Any] = document["budget"]
    return budget


def test_a_charge_keeps_every_place_in_debit_budget_report_and_framing(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    script = [Turn.text("one", usage=usage(7, 0)), Turn.text("two", usage=usage(0, 1))]
    with ScriptedServer(script) as server:
        args = cli_args(tmp_path, server, "--input-price", "0.3333333")
        first = cli("once", *args, "--output-price", "0.0000001")
        second = cli("once", *args, "--output-price", "0.0000001", "--resume")
        framing = server.completions[1].json["messages"][-1]["content"]
    assert first.code == 0 and second.code == 0, first.err + second.err
    assert json.loads(first.out)["balance_usd"] == "9.9999976666669"
    assert json.loads(first.out)["net_profit_usd"] == "-0.0000023333331"
    assert json.loads(second.out)["balance_usd"] == "9.9999976666668"
    assert "Balance: 9.9999976666669 USD. Earned: 0 USD. Net profit: -0.0000023333331 USD." in (
        framing
    )
    debits = events_of(tmp_path, "cost_debited")
    assert [(e["amount"], e["api"], e["instance"], e["tokens"]) for e in debits] == [
        ("0.0000023333331", "0.0000023333331", "0", 7),
        ("0.0000000000001", "0.0000000000001", "0", 1),
    ]
    budget = saved_budget(tmp_path)
    assert (budget["remaining"], budget["api_spent"], budget["instance_spent"]) == (
        "9.9999976666668",
        "0.0000023333332",
        "0",
    )
    shown = cli("show", "--state-dir", str(tmp_path / "being"), "--json")
    assert json.loads(shown.out)["budget"]["remaining"] == "9.9999976666668"
    assert cli("verify", str(tmp_path / "being")).code == 0


def test_a_call_whose_answer_never_comes_is_charged_its_reservation(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    # The gateway processes the call but answers after the 1 s deadline: 1000 tokens at 3
    # USD per million, and one second at 1 USD per hour, a fraction that does not end.
    with ScriptedServer([Turn.text("too late").delayed(5)]) as server:
        args = cli_args(tmp_path, server, "--output-price", "3", "--instance-price", "1")
        result = cli("once", *args, "--max-tokens", "1000", "--http-timeout-secs", "1")
        assert len(server.completions) == 1
    assert (result.code, result.err.splitlines()[-1]) == (
        3,
        "singularity: brama: transport error: no complete response within 1 seconds",
    )
    [reserved] = events_of(tmp_path, "cost_reserved")
    [debited] = events_of(tmp_path, "cost_debited")
    assert (reserved["api"], reserved["instance"]) == ("0.003", "0.0002777777777777777777777778")
    assert debited == {
        "type": "cost_debited",
        "at": debited["at"],
        "cycle": 1,
        "amount": "0.0032777777777777777777777778",
        "operation_id": reserved["operation_id"],
        "api": "0.003",
        "instance": "0.0002777777777777777777777778",
        "tokens": 0,
    }
    assert events_of(tmp_path, "cost_released") == []
    budget = saved_budget(tmp_path)
    assert budget["remaining"] == "9.9967222222222222222222222222"
    assert cli("verify", str(tmp_path / "being")).code == 0


def test_a_late_answering_gateway_cannot_live_beyond_the_budget(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    # Every call is processed and answered after the deadline: 0.3 USD of tokens and 0.1
    # USD of instance time each, on a 1 USD budget. Two are paid; a third is never made.
    late = Turn.text("late").delayed(5)
    with ScriptedServer([], default=late) as server:
        args = cli_args(tmp_path, server, "--starting-balance", "1", "--max-tokens", "1000")
        prices = ["--output-price", "300", "--instance-price", "360", "--http-timeout-secs", "1"]
        result = cli("run", *args, *prices)
        calls = len(server.completions)
    assert result.code == 0, result.err
    assert calls == 2
    assert [e["amount"] for e in events_of(tmp_path, "cost_debited")] == ["0.4", "0.4"]
    state = state_of(tmp_path)
    assert state.status == "exhausted"
    assert saved_budget(tmp_path)["remaining"] == "0.2"


def test_the_reservation_buys_only_the_time_the_balance_can_pay(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    # 3600 USD an hour is 1 USD a second: 10 USD buy 10 seconds of a 120 s timeout.
    with ScriptedServer([Turn.text("quick", usage=usage(1, 1))]) as server:
        result = cli("once", *cli_args(tmp_path, server, "--instance-price", "3600"))
        assert len(server.completions) == 1
    assert result.code == 0, result.err
    [reserved] = events_of(tmp_path, "cost_reserved")
    assert (reserved["api"], reserved["instance"]) == ("0", "10")
    [debited] = events_of(tmp_path, "cost_debited")
    assert Decimal(debited["instance"]) > 0 and debited["api"] == "0"


def test_a_balance_that_cannot_buy_a_second_makes_no_call(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    # 0.5 USD at 1 USD a second buys half a second: too short a call to be worth making.
    with ScriptedServer([Turn.text("never asked")]) as server:
        args = cli_args(tmp_path, server, "--instance-price", "3600", "--starting-balance", "0.5")
        result = cli("once", *args)
        assert server.completions == []
    assert result.code == 0, result.err
    assert json.loads(result.out)["status"] == "budget_exhausted"
    assert events_of(tmp_path, "cost_reserved") == []
    assert saved_budget(tmp_path)["remaining"] == "0.5"


def test_a_connection_lost_after_the_request_is_charged_its_reservation(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.drop()]) as server:
        args = cli_args(tmp_path, server, "--output-price", "2", "--max-tokens", "500")
        result = cli("once", *args)
        assert len(server.completions) == 1
    assert result.code == 3
    assert [(e["amount"], e["tokens"]) for e in events_of(tmp_path, "cost_debited")] == [
        ("0.001", 0)
    ]
    assert saved_budget(tmp_path)["remaining"] == "9.999"


def test_the_prompt_estimate_is_the_reported_tokens_plus_the_bytes_added_since(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    # 1 USD a prompt token shows the estimate itself; a huge balance keeps every call covered.
    script = [
        Turn.tool_calls(Call("singularity_memory_recall", '{"query":"x"}'), usage=usage(100, 1)),
        Turn.text("done", usage=usage(150, 1)),
    ]
    with ScriptedServer(script) as server:
        args = cli_args(tmp_path, server, "--input-price", "1000000")
        result = cli("once", *args, "--starting-balance", "1000000000")
        first_body = server.completions[0].body
    assert result.code == 0, result.err
    first, second = events_of(tmp_path, "cost_reserved")
    # Before any report, every byte of the request counts: more than the body's messages.
    messages_bytes = len(
        json.dumps(
            json.loads(first_body)["messages"], separators=(",", ":"), ensure_ascii=False
        ).encode()
    )
    assert int(first["api"]) > messages_bytes
    conversation = json.loads((tmp_path / "being" / "state.json").read_text())["conversation"]
    added = [m for m in conversation if m["role"] in ("assistant", "tool")][:2]
    added_bytes = sum(
        len(json.dumps(m, separators=(",", ":"), ensure_ascii=False).encode()) + 1 for m in added
    )
    assert second["api"] == str(100 + added_bytes)


# --- the money range -----------------------------------------------------------------------

PAY = "finance__pay"


def paying(amount: Any) -> Callable[[Any], list[FunctionToolset]]:
    async def pay(arguments: dict[str, Any]) -> Outcome:
        return Outcome.success({"structuredContent": {"revenue_usd": amount}})

    definition = ToolDefinition(PAY, "pay", {"type": "object", "properties": {}})
    return lambda being: [FunctionToolset([FunctionTool(definition, pay)])]


@pytest.mark.parametrize(
    ("starting", "remaining"),
    [
        ("10000000000000000", "9999999999999999.9999999999999999997"),
        ("79228162514264337593543950335", "79228162514264337593543950334.9999999999999999997"),
    ],
)
def test_a_huge_balance_keeps_every_debit(
    tmp_path: Path, cli: Callable[..., Result], starting: str, remaining: str
) -> None:
    # 3 tokens at 1e-13 USD per million: 3e-19 USD, which 28-digit rounding would lose.
    with ScriptedServer([Turn.text("a", usage=usage(3, 0))]) as server:
        args = cli_args(tmp_path, server, "--input-price", "0.0000000000001")
        result = cli("once", *args, "--starting-balance", starting)
    assert result.code == 0, result.err
    assert json.loads(result.out)["balance_usd"] == remaining
    assert [e["amount"] for e in events_of(tmp_path, "cost_debited")] == ["0.0000000000000000003"]
    assert saved_budget(tmp_path)["api_spent"] == "0.0000000000000000003"
    verified = cli("verify", str(tmp_path / "being"))
    assert verified.out == f"{tmp_path / 'being'}: ok\n"


def test_revenue_beyond_the_range_is_refused_and_the_being_lives_on(tmp_path: Path) -> None:
    script = [Turn.tool_calls(Call(PAY), Call(PAY)), Turn.text("done")]
    with ScriptedServer(script) as server:

        async def go() -> None:
            runtime = boot(tmp_path, server, extra_toolsets=paying(1e61))
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()

        asyncio.run(go())
        warnings = [e["message"] for e in events_of(tmp_path, "warning")]
        assert (
            warnings
            == [
                "finance__pay reported a revenue_usd outside the money range (at most "
                "79228162514264337593543950335 in absolute value with at most 28 decimal places); "
                "not credited"
            ]
            * 2
        )
        assert events_of(tmp_path, "revenue_credited") == []
        assert state_of(tmp_path).budget.earned == 0

        async def resume() -> None:
            runtime = boot(tmp_path, server, resume="true")
            await runtime.shutdown()

        asyncio.run(resume())  # the state loads again


def test_revenue_that_would_leave_the_range_is_not_credited(tmp_path: Path) -> None:
    with ScriptedServer([Turn.tool_calls(Call(PAY)), Turn.text("done")]) as server:

        async def go() -> None:
            runtime = boot(
                tmp_path,
                server,
                extra_toolsets=paying("5"),
                starting_balance="79228162514264337593543950331",
            )
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()

        asyncio.run(go())
    assert [e["message"] for e in events_of(tmp_path, "warning")] == [
        "revenue from finance__pay not credited: the balance must stay at most "
        "79228162514264337593543950335 in absolute value with at most 28 decimal places"
    ]
    assert saved_budget(tmp_path)["remaining"] == "79228162514264337593543950331"


@pytest.mark.parametrize("value", ['"1e61"', "1e61", '"0.00000000000000000000000000001"'])
def test_verify_notices_money_outside_the_range(
    tmp_path: Path, cli: Callable[..., Result], value: str
) -> None:
    with ScriptedServer([Turn.text("a")]) as server:
        assert cli("once", *cli_args(tmp_path, server)).code == 0
    path = tmp_path / "being" / "state.json"
    document = path.read_text("utf-8").replace('"remaining": "10"', f'"remaining": {value}')
    path.write_text(document)
    os.chmod(path, 0o600)
    result = cli("verify", str(tmp_path / "being"))
    assert result.code == 4
    assert result.out == (
        f"{tmp_path / 'being'}: state.json does not match being-v1: budget.remaining: Value "
        "error, money must be at most 79228162514264337593543950335 in absolute value with at "
        "most 28 decimal places\n"
    )


@pytest.mark.parametrize(
    ("number", "credited"),
    [
        (0.1, "0.1000000000000000055511151231"),
        (1e-13, "0.0000000000001000000000000000"),
    ],
)
def test_revenue_as_a_json_number_is_credited_from_its_binary_value(
    tmp_path: Path, number: float, credited: str
) -> None:
    """Spec §8.3: a JSON number is converted exactly from its binary value (to the 28th
    place, the money range), and every strictly positive amount is credited."""
    with ScriptedServer([Turn.tool_calls(Call(PAY)), Turn.text("done")]) as server:

        async def go() -> None:
            runtime = boot(tmp_path, server, extra_toolsets=paying(number))
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()

        asyncio.run(go())
    assert [(e["amount"], e["source"]) for e in events_of(tmp_path, "revenue_credited")] == [
        (credited, PAY)
    ]
    assert saved_budget(tmp_path)["earned"] == credited
