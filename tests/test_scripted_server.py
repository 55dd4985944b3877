"""The scripted OpenAI-compatible server, driven with a plain synchronous HTTP client."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from singularity.gateway.auth import Auth, Secret, hmac_headers
from singularity.testing.scripted_server import (
    Call,
    ScriptedServer,
    ScriptError,
    Turn,
    load_script,
)
from tests.support.polling import wait_for_async

# One shared CA context: building one per request costs ~0.2 s.
_TLS = httpx.create_ssl_context()
REQUEST = {"model": "any", "messages": [{"role": "user", "content": "hi"}]}
STOP_SECS = 60.0  # a hang detector (for a stop, or an answer): a wait would take far longer


def _post(server: ScriptedServer, body: Any = REQUEST, **options: Any) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        server.url + "v1/chat/completions",
        content=content,
        timeout=STOP_SECS,
        verify=_TLS,
        **options,
    )


def _get(url: str, **options: Any) -> httpx.Response:
    return httpx.get(url, timeout=STOP_SECS, verify=_TLS, **options)


def test_url_is_loopback_with_a_trailing_slash() -> None:
    with ScriptedServer() as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.url.endswith("/")
    with pytest.raises(RuntimeError):
        _ = ScriptedServer().url


def test_health_and_models() -> None:
    with ScriptedServer(models=["p/a", "p/b"]) as server:
        health = _get(server.url + "health")
        models = _get(server.url + "v1/models")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert models.json() == {
        "object": "list",
        "data": [
            {"id": "p/a", "object": "model", "created": 0, "owned_by": "scripted"},
            {"id": "p/b", "object": "model", "created": 0, "owned_by": "scripted"},
        ],
    }


def test_unknown_routes_are_404_in_openai_shape() -> None:
    with ScriptedServer() as server:
        response = _get(server.url + "v1/nothing")
        wrong_method = _get(server.url + "v1/chat/completions")
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "message": "no route for GET /v1/nothing",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert wrong_method.status_code == 404


def test_text_turn_has_the_openai_shape() -> None:
    with ScriptedServer([Turn.text("hello")], clock=lambda: 1234.0) as server:
        response = _post(server)
    assert response.headers["content-type"] == "application/json"
    document = response.json()
    usage = document.pop("usage")
    assert document == {
        "id": "chatcmpl-scripted-1",
        "object": "chat.completion",
        "created": 1234,
        "model": "any",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello"},
                "finish_reason": "stop",
            }
        ],
    }
    assert list(usage) == ["prompt_tokens", "completion_tokens", "total_tokens"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_tool_call_turns() -> None:
    script = [
        Turn.tool_call("remember", {"kind": "note", "text": "ż"}),
        Turn.tool_call("health", call_id="given-id"),
        Turn.tool_calls(Call("a", "{}", "x1"), Call("b", ""), content="thinking"),
    ]
    with ScriptedServer(script) as server:
        answers = [_post(server).json()["choices"][0] for _ in script]
    first = answers[0]
    assert first["finish_reason"] == "tool_calls"
    assert first["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1_0",
                "type": "function",
                "function": {"name": "remember", "arguments": '{"kind":"note","text":"ż"}'},
            }
        ],
    }
    assert answers[1]["message"]["tool_calls"][0]["id"] == "given-id"
    assert answers[1]["message"]["tool_calls"][0]["function"]["arguments"] == "{}"
    third = answers[2]["message"]
    assert third["content"] == "thinking"
    assert [c["id"] for c in third["tool_calls"]] == ["x1", "call_3_1"]
    assert third["tool_calls"][1]["function"]["arguments"] == ""


def test_custom_usage_model_and_finish_reason() -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 99}
    turn = Turn.text("x", usage=usage, model="p/real", finish_reason="length")
    with ScriptedServer([turn]) as server:
        document = _post(server).json()
    assert document["usage"] == usage
    assert document["model"] == "p/real"
    assert document["choices"][0]["finish_reason"] == "length"


def test_error_raw_and_response_turns() -> None:
    script = [
        Turn.error(503, "busy"),
        Turn.error(429, "slow down", error_type="rate_limit_error"),
        Turn.raw(b"\xffnot json", status=200, content_type="text/plain"),
        Turn.response({"choices": []}, status=201),
    ]
    with ScriptedServer(script) as server:
        responses = [_post(server) for _ in script]
    assert responses[0].status_code == 503
    assert responses[0].json()["error"] == {
        "message": "busy",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert responses[1].json()["error"]["type"] == "rate_limit_error"
    assert responses[2].content == b"\xffnot json"
    assert responses[2].headers["content-type"] == "text/plain"
    assert (responses[3].status_code, responses[3].content) == (201, b'{"choices":[]}')


def test_drop_closes_without_an_answer() -> None:
    with ScriptedServer([Turn.drop()]) as server:
        with pytest.raises(httpx.RemoteProtocolError):
            _post(server)
        assert len(server.requests) == 1
        assert server.errors == []


def test_delay() -> None:
    with ScriptedServer([Turn.text("late").delayed(0.3)]) as server:
        started = time.monotonic()
        assert _post(server).json()["choices"][0]["message"]["content"] == "late"
    assert time.monotonic() - started >= 0.3


def test_stop_does_not_wait_for_a_delayed_turn() -> None:
    server = ScriptedServer([Turn.text("never").delayed(3600)]).start()

    async def main() -> None:
        async with httpx.AsyncClient(verify=_TLS) as client:
            pending = asyncio.ensure_future(
                client.post(server.url + "v1/chat/completions", json=REQUEST, timeout=3600)
            )
            await wait_for_async(lambda: server.remaining == 0, "the turn to be taken")
            # Waiting for the turn would take an hour; a stop that returns at all did not.
            await asyncio.wait_for(asyncio.to_thread(server.stop), STOP_SECS)
            with pytest.raises(httpx.HTTPError):
                await pending

    asyncio.run(main())


def test_default_when_the_script_runs_out() -> None:
    with ScriptedServer([Turn.text("one")]) as server:
        contents = [_post(server).json()["choices"][0]["message"]["content"] for _ in range(3)]
        assert server.remaining == 0
    assert contents == ["one", "idle", "idle"]
    with ScriptedServer(default=Turn.error(500, "nothing more")) as server:
        assert _post(server).json()["error"]["message"] == "nothing more"
    with ScriptedServer(default=None) as server:
        response = _post(server)
    assert (response.status_code, response.json()["error"]["message"]) == (500, "script exhausted")


def test_turns_can_be_added_while_running() -> None:
    with ScriptedServer(default=None) as server:
        server.add(Turn.text("late addition"))
        assert server.remaining == 1
        assert _post(server).json()["choices"][0]["message"]["content"] == "late addition"


def test_requests_are_recorded() -> None:
    with ScriptedServer() as server:
        _post(server, headers={"X-Custom": "v"})
        _post(server, b"not json")
        _get(server.url + "health?probe=1")
        first, second, third = server.requests
    assert (first.method, first.path) == ("POST", "/v1/chat/completions")
    assert first.headers["x-custom"] == "v"
    assert first.body == json.dumps(REQUEST).encode()
    assert first.json == REQUEST
    assert (second.body, second.json) == (b"not json", None)
    assert (third.method, third.path, third.body) == ("GET", "/health?probe=1", b"")


def test_a_body_that_is_not_a_json_object_is_400_and_keeps_the_turn() -> None:
    with ScriptedServer([Turn.text("kept")]) as server:
        response = _post(server, b"[]")
        assert response.status_code == 400
        assert response.json()["error"]["message"] == "request body must be a JSON object"
        assert server.remaining == 1


def test_hmac_verification() -> None:
    body = json.dumps(REQUEST).encode()
    now = int(time.time())
    with ScriptedServer([Turn.text("signed")], hmac_secret=Secret("s3cret")) as server:
        good = hmac_headers(Secret("s3cret"), "agent-1", body, now)
        bad = hmac_headers(Secret("other"), "agent-1", body, now)
        refused = _post(server, body, headers=bad)
        accepted = _post(server, body, headers=good)
    assert refused.status_code == 401
    assert refused.json()["error"] == {
        "message": "invalid signature: signature does not match",
        "type": "authentication_error",
        "param": None,
        "code": None,
    }
    assert accepted.json()["choices"][0]["message"]["content"] == "signed"


def test_hmac_expected_agent_id() -> None:
    body = json.dumps(REQUEST).encode()
    headers = hmac_headers(Secret("s"), "intruder", body, int(time.time()))
    with ScriptedServer(hmac_secret="s", agent_id="agent-1") as server:
        response = _post(server, body, headers=headers)
    assert response.json()["error"]["message"] == "invalid signature: unknown agent id"


def test_bearer_check_covers_every_route() -> None:
    with ScriptedServer(bearer_token="sk-1") as server:
        assert _get(server.url + "health").status_code == 401
        assert (
            _get(server.url + "health", headers=Auth.bearer("sk-1").read_headers()).status_code
            == 200
        )
        assert _post(server, headers={"authorization": "Bearer sk-2"}).status_code == 401


def test_keep_alive_connections_are_closed_on_stop() -> None:
    server = ScriptedServer().start()
    with httpx.Client(verify=_TLS) as client:
        assert client.get(server.url + "health").status_code == 200
        stopping = threading.Thread(target=server.stop)
        stopping.start()
        stopping.join(STOP_SECS)  # an open keep-alive connection would hold it for ever
        assert not stopping.is_alive()
        with pytest.raises(httpx.HTTPError):
            client.get(server.url + "health", timeout=2)


def test_async_context_manager() -> None:
    async def main() -> int:
        async with (
            ScriptedServer([Turn.text("a")]) as server,
            httpx.AsyncClient(verify=_TLS) as client,
        ):
            response = await client.post(server.url + "v1/chat/completions", json=REQUEST)
            return response.status_code

    assert asyncio.run(main()) == 200


def test_base_path() -> None:
    with ScriptedServer(base_path="gw/v") as server:
        assert server.url.endswith("/gw/v/")
        assert _get(server.url + "health").json() == {"status": "ok"}
        assert _get(server.url.removesuffix("v/") + "health").status_code == 404


# --- script files ---------------------------------------------------------------------------


def test_script_file_as_an_array(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            [
                {"text": "hello", "delay": 0.01},
                {"tool_calls": [{"name": "a", "arguments": {"x": 1}, "id": "c1"}, {"name": "b"}]},
                {"tool_calls": [{"name": "c", "arguments": ""}], "content": "hm"},
                {"error": {"status": 500, "message": "boom"}},
                {"raw": "not json", "status": 200, "content_type": "text/plain"},
                {"response": {"choices": []}},
                {"drop": True},
                {"text": "cut", "finish_reason": "length", "model": "p/m", "usage": {"a": 1}},
            ]
        )
    )
    script = load_script(path)
    assert script.turns == [
        Turn.text("hello").delayed(0.01),
        Turn.tool_calls(Call("a", '{"x":1}', "c1"), Call("b", "{}")),
        Turn.tool_calls(Call("c", ""), content="hm"),
        Turn.error(500, "boom"),
        Turn.raw("not json", content_type="text/plain"),
        Turn.response({"choices": []}),
        Turn.drop(),
        Turn.text("cut", finish_reason="length", model="p/m", usage={"a": 1}),
    ]
    assert script.default == Turn.text("idle")
    assert script.models == ["scripted-model"]


def test_script_file_as_an_object(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            {"turns": [{"text": "a"}], "default": {"error": {"status": 503}}, "models": ["m"]}
        )
    )
    with ScriptedServer.from_file(path) as server:
        assert _get(server.url + "v1/models").json()["data"][0]["id"] == "m"
        assert _post(server).json()["choices"][0]["message"]["content"] == "a"
        assert _post(server).status_code == 503
    path.write_text(json.dumps({"turns": [], "default": None}))
    assert load_script(path).default is None


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{", "cannot read script"),
        ({"nope": []}, "a script is an array of turns or an object with a turns array"),
        ({"turns": [], "models": "m"}, "models must be an array of strings"),
        ([5], "a turn must be an object, got 5"),
        ([{}], "a turn needs exactly one of text, tool_calls, error, raw, response, drop: {}"),
        ([{"text": "a", "drop": True}], "a turn needs exactly one of"),
        ([{"text": "a", "colour": "red"}], "a turn needs exactly one of"),
        ([{"text": 5}], 'invalid turn {"text":5}: expected a string, got 5'),
        ([{"tool_calls": [{"arguments": "{}"}]}], "invalid turn"),
        ([{"error": {"message": "no status"}}], "invalid turn"),
        ([{"text": "a", "delay": "soon"}], "invalid turn"),
    ],
)
def test_bad_script_files(tmp_path: Path, document: Any, message: str) -> None:
    path = tmp_path / "script.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(ScriptError) as caught:
        load_script(path)
    assert str(caught.value).startswith(message)


def test_missing_script_file(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot read script"):
        load_script(tmp_path / "absent.json")
