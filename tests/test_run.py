"""`singularity run` over real HTTP (spec §7.6, §7.7, §9.5, §18; decisions 6, 10, 16).

Contract: a permanent gateway error stops the loop, shuts the being down (status
`failed`, `stopped` journaled) and exits 3; transient and indeterminate errors, a
`length` finish and a malformed completion are journaled as `warning` with the error's
display text and the next cycle goes on; every failed call has its reservation released
and nothing debited; `--max-cycles` counts every cycle lived, failed ones included; an
exhausted being stops with exit 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from tests.support.loop_http import Result, cli_args, dangling_calls, journal, state_of, types

ADD_RULE = "singularity_self_add_rule"


def test_a_permanent_error_aborts_run_after_shutdown(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    script = [
        Turn.tool_call(ADD_RULE, {"rule": "keep going"}),
        Turn.text("first cycle done"),
        Turn.error(401, "agent revoked"),
        Turn.text("never served"),
    ]
    with ScriptedServer(script) as server:
        args = cli_args(tmp_path, server, "--max-cycles", "5", "--input-price", "1")
        result = cli("run", *args)
        remaining = server.remaining
    assert result.code == 3
    assert result.out == ""
    assert result.err.splitlines()[-1] == "singularity: brama: HTTP 401: agent revoked"
    assert remaining == 1
    events = journal(tmp_path)
    assert types(events)[-4:] == ["cycle_started", "cost_reserved", "cost_released", "stopped"]
    assert events[-1]["status"] == "failed" and events[-1]["cycle"] == 2
    assert "warning" not in types(events)
    state = state_of(tmp_path)
    assert state.status == "failed"
    assert state.cycle == 2
    assert state.mind.rules == ["keep going"]
    assert dangling_calls(state.conversation) == []


def test_transient_and_indeterminate_errors_are_warnings_and_life_goes_on(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    script = [
        Turn.error(429, "rate limited"),
        Turn.error(500, "upstream exploded"),
        Turn.drop(),
        Turn.tool_calls(Call(ADD_RULE, '{"rule":"cut sh'), finish_reason="length"),
        Turn.raw("{not json"),
        Turn.tool_call(ADD_RULE, {"rule": "survive"}),
        Turn.text("recovered"),
    ]
    with ScriptedServer(script) as server:
        args = cli_args(tmp_path, server, "--max-cycles", "6", "--output-price", "2")
        result = cli("run", *args)
        completions = len(server.completions)
    assert result.code == 0, result.err
    assert completions == 7
    events = journal(tmp_path)
    warnings = [e for e in events if e["type"] == "warning"]
    assert [w["cycle"] for w in warnings] == [1, 2, 3, 4, 5]
    messages = [w["message"] for w in warnings]
    assert messages[:2] == ["brama: HTTP 429: rate limited", "brama: HTTP 500: upstream exploded"]
    assert messages[2].startswith("brama: transport error: ")
    assert messages[3] == f"brama: finish reason length cut the arguments of tool call {ADD_RULE}"
    assert messages[4].startswith("invalid completion response: not JSON: ")
    assert all(list(w) == ["type", "at", "cycle", "message"] for w in warnings)
    # The dropped connection's outcome is unknown: it is paid, the other failures released.
    assert types(events).count("cost_released") == 4
    assert types(events).count("cost_debited") == 3
    reserved = [e["operation_id"] for e in events if e["type"] == "cost_reserved"]
    settled = [e["operation_id"] for e in events if e["type"] in ("cost_debited", "cost_released")]
    assert reserved == settled
    state = state_of(tmp_path)
    assert state.cycle == 6
    assert state.status == "stopped"
    assert state.mind.rules == ["survive"]
    assert state.conversation[-1] == {"role": "assistant", "content": "recovered"}
    # Failed cycles leave their framing messages: consecutive user messages.
    assert [m["role"] for m in state.conversation[:6]] == ["user"] * 6
    spent = sum(Decimal(e["amount"]) for e in events if e["type"] == "cost_debited")
    assert state.budget.api_spent == spent > 0
    assert events[-1]["type"] == "stopped" and events[-1]["status"] == "stopped"


@pytest.mark.timeout(300)
def test_max_cycles_counts_failed_cycles(tmp_path: Path, cli: Callable[..., Result]) -> None:
    with ScriptedServer([Turn.error(503, "busy")], default=Turn.error(503, "busy")) as server:
        result = cli("run", *cli_args(tmp_path, server, "--max-cycles", "3"))
        completions = len(server.completions)
    assert result.code == 0, result.err
    assert completions == 3
    assert state_of(tmp_path).cycle == 3


def test_run_lives_until_exhausted_and_exits_zero(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    # Each call reserves 1 USD of output; each answer costs 0.3 USD.
    usage = {"prompt_tokens": 1, "completion_tokens": 300, "total_tokens": 301}
    with ScriptedServer([], default=Turn.text("costly", usage=usage)) as server:
        flags = ["--output-price", "1000", "--max-tokens", "1000", "--starting-balance", "2"]
        result = cli("run", *cli_args(tmp_path, server, *flags))
        completions = len(server.completions)
    assert result.code == 0, result.err
    # 2 -> 1.7 -> 1.4 -> 1.1 -> 0.8: the fifth reservation of 1 USD cannot be covered.
    assert completions == 4
    state = state_of(tmp_path)
    assert state.budget.remaining == Decimal("0.8")
    assert state.status == "exhausted"
    assert state.cycle == 4
    events = journal(tmp_path)
    assert events[-1]["type"] == "stopped" and events[-1]["status"] == "exhausted"
    assert types(events).count("cost_reserved") == 4


def test_a_dangling_tool_call_cannot_be_left_by_a_round_limit(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    calls = [Call(ADD_RULE, json.dumps({"rule": f"r{i}"})) for i in range(3)]
    with ScriptedServer([], default=Turn.tool_calls(*calls)) as server:
        args = cli_args(tmp_path, server, "--max-cycles", "2", "--max-tool-rounds", "2")
        result = cli("run", *args)
    assert result.code == 0, result.err
    state = state_of(tmp_path)
    assert dangling_calls(state.conversation) == []
    assert len(state.mind.rules) == 12
    warnings = [e for e in journal(tmp_path) if e["type"] == "warning"]
    assert [(w["cycle"], w["message"]) for w in warnings] == [
        (1, "maximum tool rounds reached"),
        (2, "maximum tool rounds reached"),
    ]


def test_once_lives_its_cycle_through_the_loop_and_its_failure_is_its_own(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    """`once` is the loop given one step: a transient error is not tolerated as `run`
    tolerates it (no `warning`), it ends the command with its error, and the being is
    shut down as after any failure."""
    with ScriptedServer([Turn.error(429, "rate limited")]) as server:
        result = cli("once", *cli_args(tmp_path, server))
    assert result.code != 0
    assert result.out == ""
    assert result.err.splitlines()[-1] == "singularity: brama: HTTP 429: rate limited"
    events = journal(tmp_path)
    assert "warning" not in types(events)
    assert types(events)[-3:] == ["cost_reserved", "cost_released", "stopped"]
