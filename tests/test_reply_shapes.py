"""The replies real model servers send, lived through by a being (decision 22).

Each reply shape is played by the scripted gateway over real HTTP and the being is run by
the CLI, as a user runs it: tool calls under any `finish_reason`, an answer cut at
`max_tokens` with text, one cut inside a tool call, and a reply without `usage`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.runtime.inspect.verify import verify_state_dir
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from tests.support.loop_http import Result, cli_args, journal, state_of, types

REMEMBER = "singularity_memory_remember"
NOTE = '{"kind":"k","text":"seen"}'
PRICES = ("--input-price", "3", "--output-price", "15", "--instance-price", "0.36")


def _reply(message: dict[str, Any], reason: str, usage: Any = "computed") -> Turn:
    document: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "served-model",
        "choices": [{"index": 0, "message": message, "finish_reason": reason}],
    }
    if usage != "absent":
        document["usage"] = (
            {"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44}
            if usage == "computed"
            else usage
        )
    return Turn.response(document)


def _calls(*arguments: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": REMEMBER, "arguments": a}}
            for i, a in enumerate(arguments)
        ],
    }


def _warnings(root: Path) -> list[str]:
    return [str(e["message"]) for e in journal(root) if e["type"] == "warning"]


@pytest.mark.parametrize("reason", ["stop", "content_filter", "length"])
def test_tool_calls_run_whatever_the_finish_reason(
    tmp_path: Path, cli: Callable[..., Result], reason: str
) -> None:
    with ScriptedServer([_reply(_calls(NOTE), reason), Turn.text("noted")]) as server:
        result = cli("once", *cli_args(tmp_path, server))
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert (report["status"], report["actions"], report["final_content"]) == (
        "completed",
        [REMEMBER],
        "noted",
    )
    state = state_of(tmp_path)
    assert [memory.text for memory in state.mind.memories] == ["seen"]
    truncated = [w for w in _warnings(tmp_path) if w.startswith("truncated: ")]
    assert truncated == (
        ["truncated: the answer reached max_tokens (2048); the tool calls run"]
        if reason == "length"
        else []
    )
    assert verify_state_dir(str(tmp_path / "being")) == []


def test_length_with_text_keeps_the_text_and_warns(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    cut = Turn.text("I will start by reading the wor", finish_reason="length")
    with ScriptedServer([cut]) as server:
        result = cli("once", *cli_args(tmp_path, server, "--max-tokens", "8"))
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert (report["status"], report["final_content"]) == (
        "completed",
        "I will start by reading the wor",
    )
    assert state_of(tmp_path).conversation[-1] == {
        "role": "assistant",
        "content": "I will start by reading the wor",
    }
    assert _warnings(tmp_path) == ["truncated: the answer reached max_tokens (8); its text is kept"]
    events = journal(tmp_path)
    assert types(events)[2:6] == ["cost_reserved", "model_completed", "cost_debited", "warning"]


def test_length_that_cut_a_tool_call_is_transient(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([_reply(_calls('{"kind":"k","te'), "length")]) as server:
        result = cli("once", *cli_args(tmp_path, server))
    assert result.code == 3
    assert result.err.splitlines()[-1] == (
        f"singularity: brama: finish reason length cut the arguments of tool call {REMEMBER}"
    )
    state = state_of(tmp_path)
    assert state.status == "stopped"  # transient: the being is not failed
    assert state.mind.memories == [] and [m["role"] for m in state.conversation] == ["user"]
    assert types(journal(tmp_path))[2:4] == ["cost_reserved", "cost_released"]


def test_run_lives_on_after_a_cut_tool_call(tmp_path: Path, cli: Callable[..., Result]) -> None:
    script = [_reply(_calls('{"kind":'), "length"), _reply(_calls(NOTE), "tool_calls")]
    with ScriptedServer([*script, Turn.text("done")]) as server:
        result = cli("run", *cli_args(tmp_path, server, "--max-cycles", "2"))
    assert result.code == 0, result.err
    state = state_of(tmp_path)
    assert state.cycle == 2 and [memory.text for memory in state.mind.memories] == ["seen"]
    assert _warnings(tmp_path)[0].startswith("brama: finish reason length cut the arguments")


@pytest.mark.parametrize("usage", ["absent", None])
def test_a_reply_without_usage_is_charged_its_reservation(
    tmp_path: Path, cli: Callable[..., Result], usage: Any
) -> None:
    with ScriptedServer([_reply({"role": "assistant", "content": "hi"}, "stop", usage)]) as server:
        result = cli("once", *cli_args(tmp_path, server, *PRICES))
    assert result.code == 0, result.err
    events = journal(tmp_path)
    assert types(events)[2:6] == ["cost_reserved", "model_completed", "cost_debited", "warning"]
    reserved, completed, debited, warning = events[2:6]
    assert completed["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert completed["model"] == "served-model"
    worst = Decimal(reserved["api"]) + Decimal(reserved["instance"])
    assert worst > 0
    assert (debited["api"], debited["instance"], debited["tokens"]) == (
        reserved["api"],
        reserved["instance"],
        0,
    )
    assert Decimal(debited["amount"]) == worst
    assert warning["message"] == (
        f"the gateway reported no usage: charged the reserved worst case, {debited['amount']} USD"
    )
    budget = state_of(tmp_path).budget
    assert budget.remaining == Decimal(10) - worst
    assert json.loads(result.out)["balance_usd"] == str(Decimal(10) - worst)
    assert verify_state_dir(str(tmp_path / "being")) == []


def test_the_model_that_answered_is_journaled(tmp_path: Path, cli: Callable[..., Result]) -> None:
    turns = [Turn.tool_calls(Call(REMEMBER, NOTE), model="gpt-4o-2024-08-06"), Turn.text("ok")]
    with ScriptedServer(turns) as server:
        result = cli("once", *cli_args(tmp_path, server, "--brama-model", "any"))
    assert result.code == 0, result.err
    models = [e["model"] for e in journal(tmp_path) if e["type"] == "model_completed"]
    assert models == ["gpt-4o-2024-08-06", "any"]  # the scripted server echoes the request
