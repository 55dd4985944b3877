"""`singularity_self_switch_model` over real HTTP (spec §11.6, §9.6, §4).

Contract: the tool always fetches `GET v1/models` first; a selector (`any`,
`any-vision-capable`, `best`, `task:*`) or an advertised id becomes `mind.current_model`
and the `model` of every later completion, and survives a resume (the configured model
is then ignored); any other id fails `model_unavailable` with `Brama does not advertise
that model`; a failing model list makes the call `indeterminate` with code `remote` and
the gateway error's display text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import (
    ModelsOutageServer,
    Result,
    bodies,
    boot,
    cli_args,
    journal,
    run,
    state_of,
)

SWITCH = "singularity_self_switch_model"
MODELS = ["scripted-model", "provider/other-model"]


def tool_result(state_conversation: list[Any]) -> dict[str, Any]:
    [message] = [m for m in state_conversation if m["role"] == "tool"]
    assert message["name"] == SWITCH
    content: dict[str, Any] = json.loads(message["content"])
    return content


def switch_once(root: Path, server: ScriptedServer, model: str) -> None:
    server.add(Turn.tool_call(SWITCH, {"model": model}), Turn.text("switched"))

    async def go() -> None:
        runtime = boot(root, server)
        try:
            await runtime.once()
        finally:
            await runtime.shutdown()

    run(go())


@pytest.mark.parametrize(
    "model", ["any", "any-vision-capable", "best", "task:coding", "provider/other-model"]
)
def test_switch_to_a_selector_or_an_advertised_id(tmp_path: Path, model: str) -> None:
    with ScriptedServer(models=MODELS) as server:
        switch_once(tmp_path, server, model)
        requests = server.requests
        first, second = bodies(server)
    assert [r.method + " " + r.path for r in requests] == [
        "GET /v1/models",  # before the first cycle, for the `Models:` section
        "POST /v1/chat/completions",
        "GET /v1/models",
        "POST /v1/chat/completions",
    ]
    assert first["model"] == "scripted-model"
    assert second["model"] == model
    state = state_of(tmp_path)
    assert state.mind.current_model == model
    assert tool_result(state.conversation) == {
        "chat_id": None,
        "content": {"model": model},
        "error_code": None,
        "message_id": None,
        "status": "success",
    }
    assert state.recent_actions[-1].status == "success"


def test_an_id_the_gateway_does_not_advertise_is_refused(tmp_path: Path) -> None:
    with ScriptedServer(models=MODELS) as server:
        switch_once(tmp_path, server, "provider/missing-model")
        second = bodies(server)[1]
    assert second["model"] == "scripted-model"
    state = state_of(tmp_path)
    assert state.mind.current_model == "scripted-model"
    [message] = [m for m in state.conversation if m["role"] == "tool"]
    assert message["content"] == (
        '{"chat_id":null,"content":{"message":"Brama does not advertise that model"},'
        '"error_code":"model_unavailable","message_id":null,"status":"failed"}'
    )
    finished = [e for e in journal(tmp_path) if e["type"] == "tool_finished"]
    assert [(e["tool"], e["status"]) for e in finished] == [(SWITCH, "failed")]


def test_a_failing_model_list_is_indeterminate_remote_even_for_a_selector(
    tmp_path: Path,
) -> None:
    server = ModelsOutageServer(models=MODELS)
    server.models_status = 503
    with server:
        switch_once(tmp_path, server, "any")
        second = bodies(server)[1]
    assert second["model"] == "scripted-model"
    state = state_of(tmp_path)
    assert state.mind.current_model == "scripted-model"
    assert tool_result(state.conversation) == {
        "chat_id": None,
        "content": {"message": "brama: HTTP 503: model list unavailable"},
        "error_code": "remote",
        "message_id": None,
        "status": "indeterminate",
    }
    assert state.recent_actions[-1].status == "indeterminate"


def test_an_unreachable_model_list_is_indeterminate_remote(tmp_path: Path) -> None:
    with ScriptedServer(models=MODELS) as server:
        server.add(Turn.tool_call(SWITCH, {"model": "best"}), Turn.text("ok"))

        async def go() -> None:
            runtime = boot(tmp_path, server)
            runtime.gateway.models_url = "http://127.0.0.1:9/v1/models"  # nothing listens
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()

        run(go())
    content = tool_result(state_of(tmp_path).conversation)
    assert content["status"] == "indeterminate"
    assert content["error_code"] == "remote"
    assert content["content"]["message"].startswith("brama: transport error: ")


def test_the_switched_model_survives_a_resume(tmp_path: Path, cli: Callable[..., Result]) -> None:
    with ScriptedServer(models=MODELS) as server:
        server.add(Turn.tool_call(SWITCH, {"model": "provider/other-model"}), Turn.text("done"))
        first = cli("once", *cli_args(tmp_path, server))
        assert first.code == 0, first.err
        server.add(Turn.text("still here"))
        # The configured model is ignored on resume: the stored one is used.
        args = cli_args(tmp_path, server, "--resume", "--brama-model", "configured-other")
        second = cli("once", *args)
        assert second.code == 0, second.err
        models = [body["model"] for body in bodies(server)]
        framing = bodies(server)[-1]["messages"][-1]["content"]
    assert models == ["scripted-model", "provider/other-model", "provider/other-model"]
    assert "Current model: provider/other-model." in framing
    assert state_of(tmp_path).mind.current_model == "provider/other-model"


def test_an_invalid_model_argument_is_refused_without_asking_the_gateway(
    tmp_path: Path,
) -> None:
    with ScriptedServer(models=MODELS) as server:
        switch_once(tmp_path, server, "x" * 257)
        paths = [r.path for r in server.requests]
    assert paths.count("/v1/models") == 1  # only the first cycle's, for the `Models:` section
    content = tool_result(state_of(tmp_path).conversation)
    assert content["error_code"] == "invalid_arguments"
    assert content["content"] == {"message": "model is invalid"}
