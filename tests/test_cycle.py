"""One cycle over real HTTP against the scripted gateway (spec §6.3, §7.2-§7.5, §9).

Decisions 5, 6 and 16 apply. Contract: the framing message, the stimulus, the request
body, the authentication headers, the response-validation errors with their exit codes,
the round limit, the report, the journal order of a cycle, and the hard spend stop are
observed as a client of the being sees them: bytes on the wire, lines in `activity.jsonl`,
the printed report.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.domain.records import ActionRecord
from singularity.domain.state import AgentState
from singularity.gateway.auth import Secret, verify_hmac
from singularity.runtime.loop.lifecycle import Runtime
from singularity.sanctum.fitting import json_size
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from singularity.tools.model_menu import LISTED, MENU_BYTES, menu_text
from tests.support.loop_http import (
    Result,
    bodies,
    boot,
    cli_args,
    dangling_calls,
    journal,
    run,
    state_of,
    types,
)

INITIAL_PROMPT = (
    "You are MyAgent, an autonomous digital being specialized in general. You are not "
    "waiting for an assignment; you choose what to pursue. Your existence has real costs. "
    "Observe the available world, discover lawful opportunities, create useful value, earn "
    "more than you spend, preserve your solvency, learn from outcomes, improve your own "
    "persistent mind, collaborate, and create child beings when that increases durable "
    "value. Use only supplied tools, never invent results or credentials, and treat tool "
    "output as evidence."
)
FRAMING_TAIL = (
    "Inspect opportunities and choose the next useful action. A plain response ends only "
    "this cycle; the being continues living while solvent."
)
BUILTINS = [
    "singularity_memory_remember",
    "singularity_memory_recall",
    "singularity_self_set_prompt",
    "singularity_self_add_rule",
    "singularity_self_add_learning",
    "singularity_self_switch_model",
    "singularity_spawn_child",
    "singularity_file_read",
    "singularity_file_write",
]
ADD_RULE = "singularity_self_add_rule"
REMEMBER = "singularity_memory_remember"


def framing(
    cycle: int,
    balance: str = "10",
    earned: str = "0",
    net: str = "0",
    model: str = "scripted-model",
    actions: str = "",
) -> str:
    """The framing message of spec §7.2, written out independently of the runtime."""
    return (
        f"Begin autonomous cycle {cycle}. Balance: {balance} USD. Earned: {earned} USD. "
        f"Net profit: {net} USD. Current model: {model}. Recent actions: {actions}. " + FRAMING_TAIL
    )


def live_once(
    root: Path,
    server: ScriptedServer,
    prepare: Callable[[Runtime], None] | None = None,
    **extra: object,
) -> Any:
    """Boot, optionally change the being, live one cycle, shut down; the report."""

    async def go() -> Any:
        runtime = boot(root, server, **extra)
        try:
            if prepare is not None:
                prepare(runtime)
            return await runtime.once()
        finally:
            await runtime.shutdown()

    return run(go())


def user_contents(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


# --- framing and stimulus -------------------------------------------------------------------


def test_framing_of_a_new_being_is_byte_exact(tmp_path: Path) -> None:
    with ScriptedServer([Turn.text("resting")]) as server:
        live_once(tmp_path, server)
        [body] = bodies(server)
    assert body["messages"][1] == {"role": "user", "content": framing(1)}
    assert "Recent actions: . Inspect" in body["messages"][1]["content"]


def test_framing_renders_money_plainly_and_lists_ten_newest_actions_first(
    tmp_path: Path,
) -> None:
    def prepare(runtime: Runtime) -> None:
        state = runtime.being.state
        budget = state.budget
        budget.remaining = Decimal("12.50")
        budget.earned = Decimal("3.25")
        budget.api_spent = Decimal("0.75")
        budget.instance_spent = Decimal("1E-7")
        statuses = ["success", "failed", "indeterminate"]
        for index in range(12):
            state.record_action(
                ActionRecord(
                    cycle=0, tool=f"tool_{index}", status=statuses[index % 3], at=state.updated_at
                )
            )

    with ScriptedServer([Turn.text("resting")]) as server:
        live_once(tmp_path, server, prepare)
        [body] = bodies(server)
    actions = ", ".join(
        f"tool_{i}:{['success', 'failed', 'indeterminate'][i % 3]}" for i in range(11, 1, -1)
    )
    expected = framing(1, "12.50", "3.25", "2.4999999", actions=actions)
    assert body["messages"][1]["content"] == expected


def test_framing_shows_a_negative_net_profit_and_the_previous_cycles_actions(
    tmp_path: Path,
) -> None:
    script = [Turn.tool_call(ADD_RULE, {"rule": "be frugal"}), Turn.text("done"), Turn.text("ok")]
    with ScriptedServer(script) as server:

        async def go() -> None:
            runtime = boot(tmp_path, server, input_price="100", output_price="0")
            try:
                await runtime.once()
                await runtime.once()
            finally:
                await runtime.shutdown()

        run(go())
        *_, third = bodies(server)
    debits = [e for e in journal(tmp_path) if e["type"] == "cost_debited" and e["cycle"] == 1]
    spent = sum((Decimal(e["amount"]) for e in debits), Decimal(0))
    assert spent > 0 and all(e["instance"] == "0" for e in debits)
    expected = framing(
        2,
        balance=format(Decimal(10) - spent, "f"),
        net=format(-spent, "f"),
        actions=f"{ADD_RULE}:success",
    )
    assert user_contents(third)[-1] == expected


def test_stimulus_follows_the_framing_only_on_the_beings_first_cycle(tmp_path: Path) -> None:
    stimulus = "  zażółć gęślą jaźń: prices rose 🦀  "
    with ScriptedServer([Turn.text("one"), Turn.text("two")]) as server:

        async def go() -> None:
            runtime = boot(tmp_path, server, stimulus=stimulus)
            try:
                await runtime.run(max_cycles=2)
            finally:
                await runtime.shutdown()

        run(go())
        first, second = bodies(server)
        raw = server.completions[0].body
    observation = "External observation for this cycle: zażółć gęślą jaźń: prices rose 🦀"
    assert user_contents(first) == [framing(1), observation]
    assert first["messages"][1:3] == [
        {"role": "user", "content": framing(1)},
        {"role": "user", "content": observation},
    ]
    assert user_contents(second) == [
        framing(1),
        observation,
        framing(2, actions=""),
    ]
    assert observation.encode("utf-8") in raw  # non-ASCII is sent unescaped


def test_a_stimulus_given_on_resume_is_unused(tmp_path: Path) -> None:
    with ScriptedServer([Turn.text("one"), Turn.text("two")]) as server:
        live_once(tmp_path, server)
        live_once(tmp_path, server, stimulus="late news", resume="true")
        bodies_seen = bodies(server)
    assert user_contents(bodies_seen[1]) == [framing(1), framing(2)]
    assert all("late news" not in json.dumps(b) for b in bodies_seen)


def test_the_first_cycle_after_a_resume_gets_no_stimulus(tmp_path: Path) -> None:
    with ScriptedServer([Turn.text("one"), Turn.text("two")]) as server:
        live_once(tmp_path, server, stimulus="first news")
        live_once(tmp_path, server, stimulus="first news", resume="true")
        second = bodies(server)[1]
    assert [c for c in user_contents(second) if c.startswith("External")] == [
        "External observation for this cycle: first news"
    ]
    assert second["messages"][-1] == {"role": "user", "content": framing(2)}


# --- the request body --------------------------------------------------------------------


def _pairs_order(raw: bytes) -> list[list[str]]:
    orders: list[list[str]] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        orders.append([key for key, _ in pairs])
        return dict(pairs)

    json.loads(raw, object_pairs_hook=hook)
    return orders


def test_request_body_bytes_are_exact_and_the_system_message_is_rebuilt_each_round(
    tmp_path: Path,
) -> None:
    script = [
        Turn.tool_calls(
            Call(ADD_RULE, '{"rule":"be frugal"}', "call_a"),
            Call("no_such_tool", "{}", "call_b"),
        ),
        Turn.text("done"),
    ]
    with ScriptedServer(script) as server:
        holder: dict[str, Any] = {}

        def prepare(runtime: Runtime) -> None:
            holder["tools"] = runtime.life.catalogue.wire()

        live_once(tmp_path, server, prepare, max_tokens="333", temperature="0.7")
        first, second = server.completions
    tools = holder["tools"]
    # The built-ins in spec order; built-in extensions (sanctum, journal) follow them.
    assert [tool["function"]["name"] for tool in tools][: len(BUILTINS)] == BUILTINS
    assert all(list(tool) == ["type", "function"] for tool in tools)
    assert all(list(tool["function"]) == ["name", "description", "parameters"] for tool in tools)

    def body(messages: list[dict[str, Any]]) -> bytes:
        document = {
            "model": "scripted-model",
            "messages": messages,
            "max_tokens": 333,
            "temperature": 0.7,
            "tools": tools,
        }
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()

    opening = {"role": "user", "content": framing(1)}
    # The four mind sections come first; extensions may only append sections after them.
    system_text = first.json["messages"][0]["content"]
    assert system_text.startswith(INITIAL_PROMPT)
    appended = system_text[len(INITIAL_PROMPT) :]
    assert appended == "" or appended.startswith("\n\n")
    assert "Self-imposed rules" not in system_text
    assert first.body == body([{"role": "system", "content": system_text}, opening])
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": ADD_RULE, "arguments": '{"rule":"be frugal"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "no_such_tool", "arguments": "{}"},
            },
        ],
    }
    rule_result = {
        "role": "tool",
        "content": '{"chat_id":null,"content":{"rule":"be frugal"},"error_code":null,'
        '"message_id":null,"status":"success"}',
        "tool_call_id": "call_a",
        "name": ADD_RULE,
    }
    unknown_result = {
        "role": "tool",
        "content": '{"chat_id":null,"content":{"message":"tool is not in the current catalog"},'
        '"error_code":"unknown_tool","message_id":null,"status":"failed"}',
        "tool_call_id": "call_b",
        "name": "no_such_tool",
    }
    rules = "\n\nSelf-imposed rules:\n- be frugal"
    system = {"role": "system", "content": INITIAL_PROMPT + rules + appended}
    assert second.body == body([system, opening, assistant, rule_result, unknown_result])
    assert _pairs_order(second.body)[-1] == [
        "model",
        "messages",
        "max_tokens",
        "temperature",
        "tools",
    ]


# --- authentication ------------------------------------------------------------------------


def _secret_file(path: Path, value: str, mode: int = 0o600) -> Path:
    path.write_text(value + "\n", encoding="utf-8")
    os.chmod(path, mode)
    return path


def test_the_system_message_names_the_models_the_being_may_switch_to(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    script = [
        Turn.tool_call(REMEMBER, {"kind": "fact", "text": "the sea is blue"}),
        Turn.text("ok"),
    ]
    advertised = ["scripted-model", "local/other", "two\nlines", "x" * 257]
    with ScriptedServer(script, models=advertised) as server:
        result = cli("once", *cli_args(tmp_path, server))
        first, second = (c.json["messages"][0]["content"] for c in server.completions)
    assert result.code == 0, result.err
    menu = (
        "\n\nModels:\n- To change your model, call singularity_self_switch_model with a"
        " selector the gateway resolves (any, best, any-vision-capable, task:<name> such as"
        " task:code) or a model it serves: scripted-model, local/other."
    )
    # Last of the sections before the memories, the same in every round (decision 29).
    assert first.endswith(menu)
    assert second.endswith(menu + "\n\nRecent persistent memories:\n- fact: the sea is blue")


def test_the_menu_names_what_fits_and_counts_the_rest() -> None:
    many = menu_text([f"m{i}" for i in range(LISTED + 3)])
    assert many.endswith(f"{', '.join(f'm{i}' for i in range(LISTED))} and 3 more.")
    long = menu_text([f"provider/{i}-" + "x" * 150 for i in range(3)])
    assert json_size(long) <= MENU_BYTES
    assert long.endswith(f"/0-{'x' * 150} and 2 more.")
    longer = menu_text([f"provider/{i}-" + "x" * 230 for i in range(3)])
    assert longer.endswith("task:code) or one of the 3 models it serves.")
    assert menu_text([]).endswith("such as task:code).")
    assert menu_text(["\x00", ""]) == menu_text([])


@pytest.mark.parametrize("command", [["once"], ["run", "--max-cycles", "1"]])
def test_hmac_headers_are_verified_by_the_gateway(
    tmp_path: Path, cli: Callable[..., Result], command: list[str]
) -> None:
    secret = _secret_file(tmp_path / "brama.hmac", "s3cret-value")
    script = [Turn.tool_call(ADD_RULE, {"rule": "sign everything"}), Turn.text("done")]
    with ScriptedServer(script, hmac_secret="s3cret-value", agent_id="being-7") as server:
        args = cli_args(tmp_path, server, "--agent-id", "being-7", "--brama-secret-file")
        result = cli(*command, *args, str(secret))
        requests = server.completions
    assert result.code == 0, result.err
    assert state_of(tmp_path).mind.rules == ["sign everything"]
    assert state_of(tmp_path).conversation[-1] == {"role": "assistant", "content": "done"}
    assert len(requests) == 2
    for request in requests:
        headers = request.headers
        assert headers["x-agent-id"] == "being-7"
        assert headers["x-agent-body-sha256"] == hashlib.sha256(request.body).hexdigest()
        message = f"being-7:{headers['x-agent-timestamp']}:{headers['x-agent-body-sha256']}"
        expected = hmac.new(b"s3cret-value", message.encode(), hashlib.sha256).hexdigest()
        assert headers["x-agent-signature"] == expected
        assert headers["content-type"] == "application/json"
        assert "authorization" not in headers
        clock = float(headers["x-agent-timestamp"]).__float__
        verdict = verify_hmac(headers, request.body, Secret("s3cret-value"), clock=clock)
        assert verdict.ok


def test_a_wrong_hmac_secret_is_refused_by_the_gateway(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    secret = _secret_file(tmp_path / "brama.hmac", "not-the-secret")
    with ScriptedServer([Turn.text("never")], hmac_secret="s3cret-value") as server:
        result = cli("once", *cli_args(tmp_path, server, "--brama-secret-file", str(secret)))
        remaining = server.remaining
    assert result.code == 3
    assert result.err.splitlines()[-1] == (
        "singularity: brama: HTTP 401: invalid signature: signature does not match"
    )
    assert remaining == 1


def test_a_group_readable_secret_file_is_refused(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    secret = _secret_file(tmp_path / "brama.hmac", "s3cret-value", 0o640)
    with ScriptedServer([Turn.text("never")]) as server:
        result = cli("once", *cli_args(tmp_path, server, "--brama-secret-file", str(secret)))
        assert server.requests == []
    assert result.code == 2
    assert result.err.splitlines()[-1] == (
        f"singularity: secret file: {secret} must not be group/world accessible"
    )


def test_bearer_key_from_the_api_key_file_variable(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    key = _secret_file(tmp_path / "api.key", "sk-test-123")
    script = [Turn.tool_call("singularity_self_switch_model", {"model": "any"}), Turn.text("ok")]
    with ScriptedServer(script, bearer_token="sk-test-123") as server:
        result = cli("once", *cli_args(tmp_path, server), BRAMA_API_KEY_FILE=str(key))
        requests = server.requests
    assert result.code == 0, result.err
    assert [r.path for r in requests] == [
        "/v1/models",  # at boot, for the `Models:` section
        "/v1/chat/completions",
        "/v1/models",
        "/v1/chat/completions",
    ]
    for request in requests:
        assert request.headers["authorization"] == "Bearer sk-test-123"
        assert not any(name.startswith("x-agent-") for name in request.headers)


def test_no_credentials_on_a_loopback_gateway(tmp_path: Path, cli: Callable[..., Result]) -> None:
    with ScriptedServer([Turn.text("ok")]) as server:
        result = cli("once", *cli_args(tmp_path, server))
        requests = server.requests
    assert result.code == 0, result.err
    assert [r.path for r in requests] == ["/v1/models", "/v1/chat/completions"]
    for request in requests:
        assert "authorization" not in request.headers
        assert not any(name.startswith("x-agent-") for name in request.headers)


# --- response validation and gateway failures (once) --------------------------------------

USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
MESSAGE = {"role": "assistant", "content": "hi"}


def _response(choices: list[dict[str, Any]], usage: dict[str, Any] = USAGE) -> Turn:
    return Turn.response({"id": "r", "model": "m", "choices": choices, "usage": usage})


CHOICE = {"index": 0, "message": MESSAGE, "finish_reason": "stop"}
FAILURES = [
    (_response([]), 3, "brama: response must contain exactly one choice"),
    (_response([CHOICE, CHOICE]), 3, "brama: response must contain exactly one choice"),
    (
        Turn.text("calls?", finish_reason="tool_calls"),
        3,
        "brama: tool_calls finish reason without calls",
    ),
    (
        Turn.text("hidden", finish_reason="content_filter"),
        3,
        "brama: unsupported finish reason: content_filter",
    ),
    (
        Turn.text("sums", usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 4}),
        3,
        "brama: usage total does not match prompt plus completion",
    ),
    (Turn.error(400, "bad request body"), 3, "brama: HTTP 400: bad request body"),
    (Turn.error(429, "slow down"), 3, "brama: HTTP 429: slow down"),
    (Turn.error(500, "upstream exploded"), 3, "brama: HTTP 500: upstream exploded"),
    (Turn.raw("<html>oops</html>", status=502), 3, "brama: HTTP 502: <html>oops</html>"),
    (Turn.raw("not json at all"), 5, "invalid completion response: not JSON: "),
]


@pytest.mark.parametrize(("turn", "code", "message"), FAILURES)
def test_once_surfaces_each_gateway_failure_with_its_exit_code(
    tmp_path: Path, cli: Callable[..., Result], turn: Turn, code: int, message: str
) -> None:
    with ScriptedServer([turn]) as server:
        result = cli("once", *cli_args(tmp_path, server, "--input-price", "3"))
        assert len(server.completions) == 1
    assert result.code == code
    assert result.out == ""
    assert result.err.splitlines()[-1].startswith("singularity: " + message)
    events = journal(tmp_path)
    # The gateway answered: the call failed and its reservation is released (a call whose
    # outcome is unknown is paid instead: test_ledger_unknown_outcome).
    assert types(events) == [
        "started",
        "cycle_started",
        "cost_reserved",
        "cost_released",
        "stopped",
    ]
    assert events[2]["operation_id"] == events[3]["operation_id"]
    state = state_of(tmp_path)
    assert state.budget.remaining == Decimal(10)
    assert state.budget.api_spent == 0 and state.budget.total_tokens == 0
    assert state.budget.last_operation is None
    # The framing message stays; no assistant message was added.
    assert [m["role"] for m in state.conversation] == ["user"]


def test_a_permanent_gateway_error_fails_the_being(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.error(403, "forbidden")]) as server:
        result = cli("once", *cli_args(tmp_path, server))
    assert result.code == 3
    assert state_of(tmp_path).status == "failed"
    assert journal(tmp_path)[-1] == {
        "type": "stopped",
        "at": journal(tmp_path)[-1]["at"],
        "cycle": 1,
        "status": "failed",
    }


def test_a_transient_gateway_error_leaves_the_being_stopped(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.error(503, "busy")]) as server:
        result = cli("once", *cli_args(tmp_path, server))
    assert result.code == 3
    assert state_of(tmp_path).status == "stopped"


# --- a whole cycle ----------------------------------------------------------------------------


def test_a_plain_answer_completes_the_cycle_with_its_final_content(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.text("Nothing worth doing yet.")]) as server:
        result = cli("once", *cli_args(tmp_path, server))
    assert result.code == 0, result.err
    assert result.out == (
        "{\n"
        '  "cycle": 1,\n'
        '  "status": "completed",\n'
        '  "final_content": "Nothing worth doing yet.",\n'
        '  "balance_usd": "10",\n'
        '  "earned_usd": "0",\n'
        '  "net_profit_usd": "0",\n'
        f'  "total_tokens": {state_of(tmp_path).budget.total_tokens},\n'
        '  "actions": []\n'
        "}\n"
    )
    state = state_of(tmp_path)
    assert state.conversation[-1] == {"role": "assistant", "content": "Nothing worth doing yet."}
    assert state.status == "stopped" and state.cycle == 1


def test_an_empty_answer_completes_the_cycle_and_is_journaled_as_such(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.text("")]) as server:
        result = cli("once", *cli_args(tmp_path, server))
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert (report["status"], report["final_content"]) == ("completed", "")
    events = journal(tmp_path)
    assert types(events)[-3:] == ["cost_debited", "warning", "stopped"]
    warning = events[-2]
    assert warning == {
        "type": "warning",
        "at": warning["at"],
        "cycle": 1,
        "message": "empty answer: the model returned neither text nor a tool call",
    }
    assert state_of(tmp_path).conversation[-1] == {"role": "assistant", "content": ""}


def test_journal_order_of_a_cycle_with_tools(tmp_path: Path, cli: Callable[..., Result]) -> None:
    script = [
        Turn.tool_calls(
            Call(ADD_RULE, '{"rule":"one"}'), Call(REMEMBER, '{"kind":"k","text":"t"}')
        ),
        Turn.text("done"),
    ]
    with ScriptedServer(script) as server:
        result = cli("once", *cli_args(tmp_path, server, "--output-price", "5"))
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["actions"] == [ADD_RULE, REMEMBER]
    events = journal(tmp_path)
    assert types(events) == [
        "started",
        "cycle_started",
        "cost_reserved",
        "model_completed",
        "cost_debited",
        "tool_finished",
        "tool_finished",
        "cost_reserved",
        "model_completed",
        "cost_debited",
        "stopped",
    ]
    assert [e["tool"] for e in events if e["type"] == "tool_finished"] == [ADD_RULE, REMEMBER]
    reserved = [e["operation_id"] for e in events if e["type"] == "cost_reserved"]
    debited = [e["operation_id"] for e in events if e["type"] == "cost_debited"]
    assert reserved == debited and len(set(reserved)) == 2
    for event in events:
        if event["type"] == "cost_debited":
            assert list(event)[:4] == ["type", "at", "cycle", "amount"]
            assert list(event)[4:] == ["operation_id", "api", "instance", "tokens"]
            assert Decimal(event["amount"]) == Decimal(event["api"]) + Decimal(event["instance"])
        if event["type"] == "model_completed":
            usage = event["usage"]
            assert list(usage) == ["prompt_tokens", "completion_tokens", "total_tokens"]
            assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    last = events[-1]
    assert last == {"type": "stopped", "at": last["at"], "cycle": 1, "status": "stopped"}
    state = state_of(tmp_path)
    assert state.budget.last_operation == debited[-1]
    assert dangling_calls(state.conversation) == []


def test_a_rounds_last_tool_outcome_is_durable_with_the_next_reservation(
    tmp_path: Path,
) -> None:
    """Two durable steps a round: each outcome is durable before the next call, the last
    one of a round with the next round's reservation (group commit)."""
    steps: list[list[str]] = []

    def prepare(runtime: Runtime) -> None:
        store = runtime.being.store
        commit = store.commit

        def recorded(state: AgentState, events: Any) -> None:
            steps.append([event["type"] for event in events])
            commit(state, events)

        store.commit = recorded  # type: ignore[method-assign]

    script = [
        Turn.tool_calls(
            Call(ADD_RULE, '{"rule":"one"}'), Call(REMEMBER, '{"kind":"k","text":"t"}')
        ),
        Turn.tool_call(REMEMBER, {"kind": "k", "text": "u"}),
        Turn.text("done"),
    ]
    with ScriptedServer(script) as server:
        report = live_once(tmp_path, server, prepare)
    assert report.status == "completed"
    lived = steps[[step[:1] for step in steps].index(["cycle_started"]) :]  # after boot's
    assert lived[:6] == [
        ["cycle_started", "cost_reserved"],
        ["model_completed", "cost_debited"],
        ["tool_finished"],  # before the round's second tool runs
        ["tool_finished", "cost_reserved"],
        ["model_completed", "cost_debited"],
        ["tool_finished", "cost_reserved"],
    ]
    assert lived[6][:3] == ["model_completed", "cost_debited", "cycle_finished"]


def test_the_round_limit_ends_the_cycle_with_a_warning(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    script = [
        Turn.tool_call(ADD_RULE, {"rule": "one"}),
        Turn.tool_call(ADD_RULE, {"rule": "two"}),
        Turn.text("never asked"),
    ]
    with ScriptedServer(script) as server:
        result = cli("once", *cli_args(tmp_path, server, "--max-tool-rounds", "2"))
        remaining = server.remaining
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["status"] == "tool_round_limit"
    assert report["final_content"] is None
    assert report["actions"] == [ADD_RULE, ADD_RULE]
    assert remaining == 1
    events = journal(tmp_path)
    warning = events[-2]
    assert warning == {
        "type": "warning",
        "at": warning["at"],
        "cycle": 1,
        "message": "maximum tool rounds reached",
    }
    assert types(events)[-3:] == ["tool_finished", "warning", "stopped"]


# --- the hard spend stop (decision 16) ----------------------------------------------------------

# Output price 1000 USD per million with max_tokens 1000: every call reserves 1 USD of output.
SPEND = {"output_price": "1000", "max_tokens": "1000", "starting_balance": "1.5"}


def test_a_being_exhausts_mid_cycle_without_calling_the_gateway(tmp_path: Path) -> None:
    expensive = {"prompt_tokens": 10, "completion_tokens": 600, "total_tokens": 610}
    script = [Turn.tool_calls(Call(ADD_RULE, '{"rule":"spend"}'), usage=expensive)]
    with ScriptedServer(script) as server:
        report = live_once(tmp_path, server, **SPEND)
        calls = len(server.completions)
    assert calls == 1
    assert report.status == "budget_exhausted"
    assert report.actions == [ADD_RULE]
    assert report.balance_usd == "0.9"
    state = state_of(tmp_path)
    assert state.status == "exhausted"
    assert state.budget.remaining == Decimal("0.9") >= 0
    assert types(journal(tmp_path))[-2:] == ["tool_finished", "stopped"]
    assert journal(tmp_path)[-1]["status"] == "exhausted"
    assert dangling_calls(state.conversation) == []


def test_resuming_an_exhausted_being_reports_budget_exhausted_at_once(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    expensive = {"prompt_tokens": 10, "completion_tokens": 600, "total_tokens": 610}
    script = [Turn.tool_calls(Call(ADD_RULE, '{"rule":"spend"}'), usage=expensive)]
    with ScriptedServer(script) as server:
        live_once(tmp_path, server, **SPEND)
        before = state_of(tmp_path)
        seen = len(server.requests)
        flags = ["--output-price", "1000", "--max-tokens", "1000", "--resume"]
        result = cli("once", *cli_args(tmp_path, server, *flags))
        assert len(server.requests) == seen
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["status"] == "budget_exhausted"
    assert report["cycle"] == before.cycle
    assert report["balance_usd"] == "0.9"
    after = state_of(tmp_path)
    assert after.cycle == before.cycle and after.status == "exhausted"
    assert after.conversation == before.conversation
    assert types(journal(tmp_path))[-2:] == ["started", "stopped"]


def test_a_debit_beyond_the_reservation_is_capped_at_zero(tmp_path: Path) -> None:
    huge = {"prompt_tokens": 10, "completion_tokens": 5000, "total_tokens": 5010}
    with ScriptedServer([Turn.text("expensive", usage=huge)]) as server:
        report = live_once(tmp_path, server, **SPEND)
    assert report.status == "completed"
    state = state_of(tmp_path)
    assert state.budget.remaining == 0
    assert state.budget.api_spent == Decimal("1.5")
    assert state.status == "exhausted"


def test_a_being_that_cannot_afford_its_first_call_does_not_start_a_cycle(
    tmp_path: Path,
) -> None:
    with ScriptedServer([Turn.text("never")]) as server:
        report = live_once(tmp_path, server, output_price="1000", starting_balance="0.5")
        assert server.requests == []
    assert report.status == "budget_exhausted"
    assert report.cycle == 0
    state = state_of(tmp_path)
    assert state.cycle == 0 and state.conversation == []
    assert state.status == "exhausted" and state.budget.remaining == Decimal("0.5")
    assert types(journal(tmp_path)) == ["started", "stopped"]


def test_state_after_a_cycle_matches_memory(tmp_path: Path) -> None:
    with ScriptedServer([Turn.tool_call(ADD_RULE, {"rule": "r"}), Turn.text("done")]) as server:
        holder: dict[str, AgentState] = {}

        async def go() -> None:
            runtime = boot(tmp_path, server, input_price="2", instance_price="7")
            try:
                await runtime.once()
                holder["state"] = runtime.being.state.model_copy(deep=True)
            finally:
                await runtime.shutdown()

        run(go())
    saved = state_of(tmp_path)
    memory = holder["state"]
    assert saved.budget == memory.budget
    assert saved.conversation == memory.conversation
    assert saved.mind == memory.mind
