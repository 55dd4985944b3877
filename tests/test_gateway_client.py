"""The Brama client and wire format (spec §9 with decisions 5 and 6).

Most tests go over real HTTP to the scripted server; wire edge cases the server
cannot produce (a failing write, a refused connect, a slow trickle) use
`httpx.MockTransport`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from singularity.errors import BramaError, JsonFailure, RetryClass
from singularity.gateway.auth import Auth
from singularity.gateway.client import BramaClient, is_loopback_url, resolve_endpoint
from singularity.gateway.wire import (
    Completion,
    ToolCall,
    Usage,
    completion_body,
    parse_completion,
)
from singularity.jsoncodec import compact
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from singularity.tools.base import ToolDefinition
from tests.support.loop_http import ModelsOutageServer
from tests.support.ports import closed_port_url
from tests.support.reached import Reached

NOW = 1_700_000_000
TOOLS = [
    ToolDefinition(
        "singularity_memory_remember",
        "Persist one memory.",
        {"type": "object", "properties": {"kind": {"type": "string"}}},
    )
]
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Jesteś istotą."},
    {"role": "user", "content": "zażółć gęślą jaźń ✓"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "content": '{"ok":true}', "tool_call_id": "c1", "name": "t"},
]
EXPECTED_BODY = (
    '{"model":"any","messages":[{"role":"system","content":"Jesteś istotą."},'
    '{"role":"user","content":"zażółć gęślą jaźń ✓"},'
    '{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",'
    '"function":{"name":"t","arguments":"{}"}}]},'
    '{"role":"tool","content":"{\\"ok\\":true}","tool_call_id":"c1","name":"t"}],'
    '"max_tokens":2048,"temperature":0.2,'
    '"tools":[{"type":"function","function":{"name":"singularity_memory_remember",'
    '"description":"Persist one memory.","parameters":{"type":"object",'
    '"properties":{"kind":{"type":"string"}}}}}]}'
).encode()


def _clock() -> float:
    return float(NOW)


def _client(base_url: str, **options: Any) -> BramaClient:
    options.setdefault("auth", Auth.none())
    options.setdefault("timeout", 5.0)
    options.setdefault("clock", _clock)
    return BramaClient(base_url, agent_id="agent-1", **options)


def _run(call: Callable[[BramaClient], Awaitable[Any]], base_url: str, **options: Any) -> Any:
    async def main() -> Any:
        async with _client(base_url, **options) as client:
            return await call(client)

    return asyncio.run(main())


def _complete(base_url: str, **options: Any) -> Completion:
    result = _run(lambda c: c.complete("any", MESSAGES, TOOLS), base_url, **options)
    assert isinstance(result, Completion)
    return result


def _failure(call: Callable[[BramaClient], Awaitable[Any]], base_url: str, **options: Any) -> Any:
    with pytest.raises((BramaError, JsonFailure)) as caught:
        _run(call, base_url, **options)
    return caught.value


def _complete_error(base_url: str, **options: Any) -> BramaError:
    error = _failure(lambda c: c.complete("any", MESSAGES, TOOLS), base_url, **options)
    assert isinstance(error, BramaError)
    return error


def _answer(**overrides: Any) -> dict[str, Any]:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "hi"},
        "finish_reason": "stop",
    }
    document: dict[str, Any] = {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [choice],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    document.update(overrides)
    return document


def _choice(message: Any, finish_reason: Any = "stop") -> list[dict[str, Any]]:
    return [{"index": 0, "message": message, "finish_reason": finish_reason}]


def _call(arguments: Any = "{}", **extra: Any) -> dict[str, Any]:
    return {
        "id": "k1",
        "type": "function",
        "function": {"name": "t", "arguments": arguments},
        **extra,
    }


# --- request body -------------------------------------------------------------------------


def test_body_is_compact_utf8_with_keys_in_spec_order() -> None:
    assert completion_body("any", MESSAGES, 2048, 0.2, TOOLS) == EXPECTED_BODY


def test_body_omits_an_empty_tools_array() -> None:
    body = completion_body("m", [{"role": "user", "content": "x"}], 5, 1.0, [])
    assert body == (
        b'{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"temperature":1.0}'
    )


def test_a_configured_tool_choice_follows_the_tools() -> None:
    body = completion_body("any", MESSAGES, 2048, 0.2, TOOLS, "auto")
    assert body == EXPECTED_BODY[:-1] + b',"tool_choice":"auto"}'
    bare = completion_body("m", [{"role": "user", "content": "x"}], 5, 1.0, [], "auto")
    assert b"tool_choice" not in bare  # no tools, nothing to choose from
    with ScriptedServer([Turn.text("ok")]) as server:
        _complete(server.url, tool_choice="required")
        assert server.completions[0].json["tool_choice"] == "required"


def test_the_bytes_sent_are_the_bytes_signed() -> None:
    with ScriptedServer(hmac_secret="s3cret", agent_id="agent-1", clock=_clock) as server:
        completion = _complete(server.url, auth=Auth.hmac("s3cret"))
        (request,) = server.completions
    assert completion.content == "idle"
    assert request.body == EXPECTED_BODY
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-agent-id"] == "agent-1"
    assert request.headers["x-agent-timestamp"] == "1700000000"
    assert request.headers["x-agent-body-sha256"] == hashlib.sha256(EXPECTED_BODY).hexdigest()
    assert "authorization" not in request.headers


def test_last_request_body_exposes_the_exact_bytes() -> None:
    with ScriptedServer() as server:

        async def call(client: BramaClient) -> bytes | None:
            await client.complete("any", MESSAGES, TOOLS)
            return client.last_request_body

        assert _run(call, server.url) == EXPECTED_BODY == server.completions[0].body


def test_max_tokens_and_temperature_come_from_the_constructor() -> None:
    with ScriptedServer() as server:
        _complete(server.url, max_tokens=7, temperature=0)
        sent = server.completions[0].json
    assert (sent["max_tokens"], sent["temperature"]) == (7, 0)
    assert list(sent) == ["model", "messages", "max_tokens", "temperature", "tools"]
    assert "stream" not in sent and "tool_choice" not in sent


# --- authentication over HTTP -------------------------------------------------------------


def test_server_refuses_a_wrong_secret_without_consuming_a_turn() -> None:
    with ScriptedServer([Turn.text("first")], hmac_secret="s3cret", clock=_clock) as server:
        error = _complete_error(server.url, auth=Auth.hmac("wrong"))
        assert error.message == "HTTP 401: invalid signature: signature does not match"
        assert error.retry is RetryClass.PERMANENT
        assert server.remaining == 1
        assert _complete(server.url, auth=Auth.hmac("s3cret")).content == "first"


def test_server_refuses_a_stale_timestamp() -> None:
    with ScriptedServer(hmac_secret="s3cret", clock=_clock) as server:
        error = _complete_error(server.url, auth=Auth.hmac("s3cret"), clock=lambda: NOW - 301.0)
    assert error.message == "HTTP 401: invalid signature: timestamp outside the allowed window"


def test_unsigned_request_to_a_signing_server_is_refused() -> None:
    with ScriptedServer(hmac_secret="s3cret") as server:
        error = _complete_error(server.url)
    assert error.message == "HTTP 401: invalid signature: missing header x-agent-id"


def test_bearer_key_is_sent_on_every_request_and_nothing_is_signed() -> None:
    with ScriptedServer(bearer_token="sk-test") as server:

        async def everything(client: BramaClient) -> list[str]:
            await client.health()
            models = await client.models()
            await client.complete("any", MESSAGES, TOOLS)
            return models

        assert _run(everything, server.url, auth=Auth.bearer("sk-test")) == ["scripted-model"]
        requests = server.requests
    assert [r.headers["authorization"] for r in requests] == ["Bearer sk-test"] * 3
    assert not any(name.startswith("x-agent-") for r in requests for name in r.headers)


def test_a_missing_bearer_key_is_refused() -> None:
    with ScriptedServer(bearer_token="sk-test") as server:
        error = _complete_error(server.url)
        models_error = _failure(lambda c: c.models(), server.url)
    assert error.message == "HTTP 401: invalid bearer token"
    assert error.retry is RetryClass.PERMANENT
    assert models_error.message == "HTTP 401: invalid bearer token"
    assert models_error.retry is RetryClass.TRANSIENT


def test_gets_are_never_signed() -> None:
    with ScriptedServer() as server:
        _run(lambda c: c.models(), server.url, auth=Auth.hmac("s3cret"))
        (request,) = server.requests
    assert not any(name.startswith("x-agent-") for name in request.headers)


def test_agent_id_must_be_a_header_value_to_sign() -> None:
    with pytest.raises(BramaError) as caught:
        BramaClient("http://127.0.0.1:1/", agent_id="agent\n1", auth=Auth.hmac("s"))
    assert caught.value.message == "cannot initialize signer: agent id must be printable ASCII"
    assert caught.value.retry is RetryClass.PERMANENT


def test_environment_proxies_are_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with ScriptedServer() as server:
        assert _complete(server.url).content == "idle"


# --- endpoints ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "reference", "expected"),
    [
        ("http://h/api", "v1/models", "http://h/v1/models"),
        ("http://h/api/", "v1/models", "http://h/api/v1/models"),
        ("http://h", "health", "http://h/health"),
        ("http://h:8081", "v1/chat/completions", "http://h:8081/v1/chat/completions"),
        ("https://h/a/b/c", "health", "https://h/a/b/health"),
        ("http://h/a/?q=1", "health", "http://h/a/health"),
        ("http://[::1]:9/x/", "v1/models", "http://[::1]:9/x/v1/models"),
        # `…/v1` and `…/v1/` name the server above them (decision 22).
        ("https://api.openai.com/v1", "health", "https://api.openai.com/health"),
        ("https://api.openai.com/v1/", "v1/models", "https://api.openai.com/v1/models"),
        (
            "https://openrouter.ai/api/v1",
            "v1/chat/completions",
            "https://openrouter.ai/api/v1/chat/completions",
        ),
        ("http://h:8000/v1//", "health", "http://h:8000/health"),
        ("http://h/xv1", "health", "http://h/health"),
        ("http://h/v1x/", "health", "http://h/v1x/health"),
    ],
)
def test_endpoints_resolve_as_relative_references(base: str, reference: str, expected: str) -> None:
    assert resolve_endpoint(base, reference) == expected


@pytest.mark.parametrize(
    ("base", "message"),
    [
        ("ftp://h/", "invalid endpoint: not an absolute http or https URL: ftp://h/"),
        ("h/api", "invalid endpoint: not an absolute http or https URL: h/api"),
        ("http://", "invalid endpoint: not an absolute http or https URL: http://"),
        ("http://[::1", "invalid endpoint: Invalid port: ':1'"),
    ],
)
def test_an_unusable_base_url_is_a_permanent_error(base: str, message: str) -> None:
    with pytest.raises(BramaError) as caught:
        BramaClient(base, agent_id="a", auth=Auth.none())
    assert caught.value.message == message
    assert caught.value.retry is RetryClass.PERMANENT


def test_each_call_goes_to_its_resolved_endpoint() -> None:
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, str(request.url)))
        if request.url.path.endswith("completions"):
            return httpx.Response(200, json=_answer())
        return httpx.Response(200, json={"status": "ok", "data": []})

    async def everything(client: BramaClient) -> None:
        await client.health()
        await client.models()
        await client.complete("m", [], [])

    _run(everything, "http://gw.example/api", transport=httpx.MockTransport(handler))
    _run(everything, "http://gw.example/api/", transport=httpx.MockTransport(handler))
    assert seen == [
        ("GET", "http://gw.example/health"),
        ("GET", "http://gw.example/v1/models"),
        ("POST", "http://gw.example/v1/chat/completions"),
        ("GET", "http://gw.example/api/health"),
        ("GET", "http://gw.example/api/v1/models"),
        ("POST", "http://gw.example/api/v1/chat/completions"),
    ]


def test_base_path_without_trailing_slash_loses_its_last_segment_over_http() -> None:
    with ScriptedServer(base_path="/api/") as server:
        assert server.url.endswith("/api/")
        assert _run(lambda c: c.models(), server.url) == ["scripted-model"]
        error = _failure(lambda c: c.models(), server.url.rstrip("/"))
        paths = [r.path for r in server.requests]
    assert error.message == "HTTP 404: no route for GET /v1/models"
    assert error.retry is RetryClass.TRANSIENT
    assert paths == ["/api/v1/models", "/v1/models"]


@pytest.mark.parametrize("suffix", ["v1", "v1/"])
def test_a_base_url_ending_in_v1_reaches_the_same_server(suffix: str) -> None:
    with ScriptedServer([Turn.text("hi")], base_path="/api/") as server:
        base = server.url + suffix

        async def everything(client: BramaClient) -> Completion:
            await client.health()
            assert await client.models() == ["scripted-model"]
            return await client.complete("m", [], [])

        completion = _run(everything, base)
        paths = [request.path for request in server.requests]
    assert completion.content == "hi"
    assert paths == ["/api/health", "/api/v1/models", "/api/v1/chat/completions"]


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8081", True),
        ("http://127.255.0.9/", True),
        ("http://localhost:1/x", True),
        ("http://LOCALHOST./", True),
        ("http://[::1]:8080/", True),
        ("http://[::ffff:127.0.0.1]/", True),
        ("https://api.openai.com/v1/", False),
        ("http://10.0.0.1/", False),
        ("http://[::2]/", False),
        ("http://localhost.example.com/", False),
        ("http://127.0.0.1.example.com/", False),
        ("not a url", False),
        ("http://[::1", False),
    ],
)
def test_is_loopback_url(url: str, loopback: bool) -> None:
    assert is_loopback_url(url) is loopback


# --- health and models --------------------------------------------------------------------


def test_health_ok() -> None:
    with ScriptedServer() as server:
        assert _run(lambda c: c.health(), server.url) is None
        assert server.requests[0].method == "GET"
        assert server.requests[0].path == "/health"


def test_health_not_ok_is_permanent() -> None:
    with ScriptedServer(health={"status": "degraded"}) as server:
        error = _failure(lambda c: c.health(), server.url)
    assert (error.message, error.retry) == ("health response is not ok", RetryClass.PERMANENT)


@pytest.mark.parametrize("body", [b"OK", b"[]", b'{"status":"OK"}', b'{"status":true}'])
def test_health_answers_that_are_not_ok_json_are_permanent(body: bytes) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    error = _failure(lambda c: c.health(), "http://gw/", transport=transport)
    assert (error.message, error.retry) == ("health response is not ok", RetryClass.PERMANENT)


@pytest.mark.parametrize(
    "server",
    [
        ScriptedServer(serves_health=False),  # llama-cpp-python, Ollama, OpenAI
        ScriptedServer(health=b""),  # vLLM
        ScriptedServer(health=b"", health_status=204),
        ScriptedServer(health=b"", health_status=405),
    ],
    ids=["missing", "empty-200", "empty-204", "not-allowed"],
)
def test_health_falls_back_to_the_model_list(server: ScriptedServer) -> None:
    with server:
        assert _run(lambda c: c.health(), server.url) is None
        paths = [request.path for request in server.requests]
    assert paths == ["/health", "/v1/models"]


def test_health_fallback_fails_as_the_model_list_fails() -> None:
    with ModelsOutageServer(serves_health=False) as server:
        server.models_status = 401
        error = _failure(lambda c: c.health(), server.url)
    assert (error.message, error.retry) == (
        "HTTP 401: model list unavailable",
        RetryClass.TRANSIENT,
    )


def test_health_status_failure_is_transient() -> None:
    with ScriptedServer(health_status=503) as server:
        error = _failure(lambda c: c.health(), server.url)
    assert (error.message, error.retry) == ('HTTP 503: {"status":"ok"}', RetryClass.TRANSIENT)


@pytest.mark.parametrize("method", ["health", "models", "complete"])
def test_connection_refused_is_transient(method: str) -> None:
    calls: dict[str, Callable[[BramaClient], Awaitable[Any]]] = {
        "health": lambda c: c.health(),
        "models": lambda c: c.models(),
        "complete": lambda c: c.complete("m", [], []),
    }
    error = _failure(calls[method], closed_port_url())
    assert error.retry is RetryClass.TRANSIENT
    assert error.message.startswith("transport error: ")


def test_models_lists_ids_in_order() -> None:
    with ScriptedServer(models=["b/two", "a/one"]) as server:
        assert _run(lambda c: c.models(), server.url) == ["b/two", "a/one"]
        assert server.requests[0].path == "/v1/models"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"nope", "invalid models response: data must be an array"),
        (b'{"data":{}}', "invalid models response: data must be an array"),
        (b'{"data":[{"id":1}]}', "invalid models response: every entry needs a string id"),
        (b'{"data":["m"]}', "invalid models response: every entry needs a string id"),
    ],
)
def test_malformed_model_lists_are_transient(body: bytes, message: str) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    error = _failure(lambda c: c.models(), "http://gw/", transport=transport)
    assert (error.message, error.retry) == (message, RetryClass.TRANSIENT)


def test_models_transport_failure_is_transient() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("connection reset")

    error = _failure(lambda c: c.models(), "http://gw/", transport=httpx.MockTransport(handler))
    assert (error.message, error.retry) == (
        "transport error: connection reset",
        RetryClass.TRANSIENT,
    )


# --- completion: HTTP failures ------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "retry"),
    [
        (400, RetryClass.PERMANENT),
        (401, RetryClass.PERMANENT),
        (403, RetryClass.PERMANENT),
        (404, RetryClass.PERMANENT),
        (408, RetryClass.PERMANENT),
        (429, RetryClass.TRANSIENT),
        (500, RetryClass.TRANSIENT),
        (502, RetryClass.TRANSIENT),
        (503, RetryClass.TRANSIENT),
        (599, RetryClass.TRANSIENT),
    ],
)
def test_http_errors_are_classified(status: int, retry: RetryClass) -> None:
    with ScriptedServer([Turn.error(status, "model overloaded: zażółć")]) as server:
        error = _complete_error(server.url)
    assert error.message == f"HTTP {status}: model overloaded: zażółć"
    assert error.retry is retry
    assert str(error) == f"brama: HTTP {status}: model overloaded: zażółć"


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ("<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        ("x" * 1000, "x" * 800),
        ("ż" * 1000, "ż" * 800),
        ('{"error":"plain string"}', '{"error":"plain string"}'),
        ('{"error":{"message":5}}', '{"error":{"message":5}}'),
        ('{"detail":"nope"}', '{"detail":"nope"}'),
        ('{"error":{"message":""}}', ""),
        ("", ""),
    ],
)
def test_error_text_is_error_message_or_first_800_characters(body: str, shown: str) -> None:
    with ScriptedServer([Turn.raw(body, status=502, content_type="text/html")]) as server:
        error = _complete_error(server.url)
    assert error.message == f"HTTP 502: {shown}"


def test_a_redirect_is_not_followed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(307, headers={"location": "http://elsewhere/"}, content=b"")

    error = _complete_error("http://gw/", transport=httpx.MockTransport(handler))
    assert (error.message, error.retry) == ("HTTP 307: ", RetryClass.PERMANENT)


# --- completion: transport failures -------------------------------------------------------


def test_dropped_connection_is_indeterminate() -> None:
    with ScriptedServer([Turn.drop(), Turn.text("after")]) as server:
        error = _complete_error(server.url)
        assert error.retry is RetryClass.INDETERMINATE
        assert error.message == "transport error: Server disconnected without sending a response."
        assert _complete(server.url).content == "after"
        assert len(server.completions) == 2


def test_a_slow_answer_times_out_as_indeterminate() -> None:
    with ScriptedServer([Turn.text("late").delayed(5)]) as server:
        error = _complete_error(server.url, timeout=0.2)
    assert error.retry is RetryClass.INDETERMINATE
    assert error.message.startswith("transport error: ")


def test_the_timeout_is_a_total_deadline() -> None:
    async def trickle() -> Any:
        for _ in range(20):
            await asyncio.sleep(0.05)
            yield b" "

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=trickle())

    error = _complete_error("http://gw/", transport=httpx.MockTransport(handler), timeout=0.3)
    assert error.message == "transport error: no complete response within 0.3 seconds"
    assert error.retry is RetryClass.INDETERMINATE


@pytest.mark.parametrize(
    ("raised", "message", "retry"),
    [
        (httpx.ConnectError("refused"), "transport error: refused", RetryClass.TRANSIENT),
        (httpx.ConnectTimeout(""), "transport error: ConnectTimeout", RetryClass.TRANSIENT),
        (httpx.PoolTimeout("pool"), "transport error: pool", RetryClass.TRANSIENT),
        (httpx.WriteError("broken pipe"), "transport error: broken pipe", RetryClass.INDETERMINATE),
        (httpx.WriteTimeout(""), "transport error: WriteTimeout", RetryClass.INDETERMINATE),
        (httpx.ReadError("reset"), "transport error: reset", RetryClass.INDETERMINATE),
        (httpx.ReadTimeout(""), "transport error: ReadTimeout", RetryClass.INDETERMINATE),
        (
            httpx.RemoteProtocolError("bad status line"),
            "transport error: bad status line",
            RetryClass.INDETERMINATE,
        ),
    ],
)
def test_transport_failures_on_completion(
    raised: Exception, message: str, retry: RetryClass
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise raised

    error = _complete_error("http://gw/", transport=httpx.MockTransport(handler))
    assert (error.message, error.retry) == (message, retry)


def test_an_oversized_answer_is_refused() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"x" * 200))
    error = _complete_error("http://gw/", transport=transport, max_response_bytes=100)
    assert (error.message, error.retry) == (
        "response body exceeds 100 bytes",
        RetryClass.INDETERMINATE,
    )
    models_error = _failure(
        lambda c: c.models(), "http://gw/", transport=transport, max_response_bytes=100
    )
    assert models_error.retry is RetryClass.TRANSIENT


# --- completion: the response contract ----------------------------------------------------


def test_text_answer() -> None:
    with ScriptedServer(
        [
            Turn.text(
                "Dzień dobry",
                usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
                model="p/m",
            )
        ]
    ) as server:
        completion = _complete(server.url)
    assert completion.content == "Dzień dobry"
    assert completion.tool_calls == []
    assert completion.finish_reason == "stop"
    assert completion.usage == Usage(7, 3)
    assert completion.model == "p/m"
    assert completion.id.startswith("chatcmpl-scripted-")


def test_tool_calls_answer_with_null_content() -> None:
    script = [
        Turn.tool_calls(Call("a", '{"x":1}', "id-a"), Call("b", "")),
    ]
    with ScriptedServer(script) as server:
        completion = _complete(server.url)
    assert completion.content == ""
    assert completion.finish_reason == "tool_calls"
    assert completion.tool_calls[0] == ToolCall("id-a", "function", "a", '{"x":1}')
    assert completion.tool_calls[1].arguments == "{}"
    assert completion.tool_calls[1].id
    assert completion.tool_calls[0].wire() == {
        "id": "id-a",
        "type": "function",
        "function": {"name": "a", "arguments": '{"x":1}'},
    }


# --- replies real servers send (decision 22) ------------------------------------------------


@pytest.mark.parametrize("reason", ["stop", "length", "content_filter", "function_call", ""])
def test_tool_calls_are_kept_whatever_the_finish_reason(reason: str) -> None:
    document = _answer(choices=_choice({"content": None, "tool_calls": [_call('{"x":1}')]}, reason))
    with ScriptedServer([Turn.response(document)]) as server:
        completion = _complete(server.url)
    assert completion.tool_calls == [ToolCall("k1", "function", "t", '{"x":1}')]
    assert completion.finish_reason == reason
    assert completion.truncated is (reason == "length")


def test_length_with_text_keeps_the_text() -> None:
    with ScriptedServer([Turn.text("cut of", finish_reason="length")]) as server:
        completion = _complete(server.url)
    assert (completion.content, completion.tool_calls) == ("cut of", [])
    assert completion.truncated
    assert completion.usage is not None


@pytest.mark.parametrize(
    ("message", "text"),
    [
        (
            {"content": None, "tool_calls": [_call('{"path": "no')]},
            "finish reason length cut the arguments of tool call t",
        ),
        (
            {"content": "x", "tool_calls": [_call("{}"), _call('{"a":', id="k2")]},
            "finish reason length cut the arguments of tool call t",
        ),
        ({"content": ""}, "finish reason length with no text"),
        ({"content": None}, "finish reason length with no text"),
    ],
)
def test_length_that_cut_a_call_or_left_nothing_is_transient(
    message: dict[str, Any], text: str
) -> None:
    with ScriptedServer([Turn.response(_answer(choices=_choice(message, "length")))]) as server:
        error = _complete_error(server.url)
    assert (error.message, error.retry) == (text, RetryClass.TRANSIENT)


@pytest.mark.parametrize("usage", [None, "absent"])
def test_a_reply_without_usage_has_no_usage(usage: str | None) -> None:
    document = _answer()
    if usage == "absent":
        del document["usage"]
    else:
        document["usage"] = None
    with ScriptedServer([Turn.response(document)]) as server:
        completion = _complete(server.url)
    assert (completion.content, completion.usage) == ("hi", None)


def test_malformed_body_is_a_json_failure() -> None:
    with ScriptedServer([Turn.raw("{not json")]) as server:
        error = _failure(lambda c: c.complete("m", [], []), server.url)
    assert isinstance(error, JsonFailure)
    assert str(error) == (
        "invalid completion response: not JSON: "
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )


CONTRACT_VIOLATIONS = [
    (_answer(choices=[]), "response must contain exactly one choice", RetryClass.PERMANENT),
    (
        _answer(choices=_choice({"content": "a"}) * 2),
        "response must contain exactly one choice",
        RetryClass.PERMANENT,
    ),
    (
        _answer(choices=_choice({"content": ""}, "tool_calls")),
        "tool_calls finish reason without calls",
        RetryClass.PERMANENT,
    ),
    (
        _answer(choices=_choice({"content": "x"}, "content_filter")),
        "unsupported finish reason: content_filter",
        RetryClass.PERMANENT,
    ),
    (
        _answer(choices=_choice({"content": "x"}, "")),
        "unsupported finish reason: ",
        RetryClass.PERMANENT,
    ),
    (
        _answer(usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 6}),
        "usage total does not match prompt plus completion",
        RetryClass.PERMANENT,
    ),
]


@pytest.mark.parametrize(("document", "message", "retry"), CONTRACT_VIOLATIONS)
def test_contract_violations_over_http(
    document: dict[str, Any], message: str, retry: RetryClass
) -> None:
    with ScriptedServer([Turn.response(document)]) as server:
        error = _complete_error(server.url)
    assert (error.message, error.retry) == (message, retry)
    assert str(error) == f"brama: {message}"


def test_zero_total_is_recomputed() -> None:
    completion = parse_completion(
        compact(_answer(usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 0}))
    )
    assert completion.usage == Usage(3, 2)


@pytest.mark.parametrize(
    ("message", "content", "calls"),
    [
        ({"content": None}, "", []),
        ({}, "", []),
        ({"content": "x", "tool_calls": None}, "x", []),
        ({"content": "x", "tool_calls": []}, "x", []),
    ],
)
def test_lenient_message_fields(message: dict[str, Any], content: str, calls: list[Any]) -> None:
    completion = parse_completion(compact(_answer(choices=_choice(message))))
    assert (completion.content, completion.tool_calls) == (content, calls)


def test_tool_call_without_type_is_a_function_call() -> None:
    call = {"id": "k1", "function": {"name": "t", "arguments": ""}}
    completion = parse_completion(
        compact(_answer(choices=_choice({"content": None, "tool_calls": [call]}, "tool_calls")))
    )
    assert completion.tool_calls == [ToolCall("k1", "function", "t", "{}")]


def test_arguments_are_kept_raw() -> None:
    raw = '{ "b": 2,\n "a": "ż" }'
    completion = parse_completion(
        compact(_answer(choices=_choice({"tool_calls": [_call(raw)]}, "tool_calls")))
    )
    assert completion.tool_calls[0].arguments == raw


SHAPE_FAILURES = [
    ([], "the response must be an object"),
    ({}, "id is missing"),
    (_answer(id=7), "id must be a string"),
    ({k: v for k, v in _answer().items() if k != "model"}, "model is missing"),
    ({k: v for k, v in _answer().items() if k != "choices"}, "choices is missing"),
    (_answer(choices={}), "choices must be an array"),
    (_answer(usage=[]), "usage must be an object"),
    (_answer(usage={"prompt_tokens": 1, "completion_tokens": 1}), "usage.total_tokens is missing"),
    (
        _answer(usage={"prompt_tokens": "1", "completion_tokens": 1, "total_tokens": 2}),
        "usage.prompt_tokens must be a non-negative integer",
    ),
    (
        _answer(usage={"prompt_tokens": 1, "completion_tokens": True, "total_tokens": 2}),
        "usage.completion_tokens must be a non-negative integer",
    ),
    (
        _answer(usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2.0}),
        "usage.total_tokens must be a non-negative integer",
    ),
    (
        _answer(usage={"prompt_tokens": -1, "completion_tokens": 1, "total_tokens": 0}),
        "usage.prompt_tokens must be a non-negative integer",
    ),
    (_answer(choices=[None]), "choices[0] must be an object"),
    (_answer(choices=[{"finish_reason": "stop"}]), "choices[0].message is missing"),
    (_answer(choices=_choice("hi")), "choices[0].message must be an object"),
    (
        _answer(choices=_choice({"content": ["part"]})),
        "choices[0].message.content must be a string or null",
    ),
    (
        _answer(choices=_choice({"tool_calls": {}})),
        "choices[0].message.tool_calls must be an array",
    ),
    (
        _answer(choices=_choice({"tool_calls": [_call({"a": 1})]}, "tool_calls")),
        "choices[0].message.tool_calls[0].function.arguments must be a string",
    ),
    (
        _answer(choices=_choice({"tool_calls": [{"id": "k", "type": "function"}]})),
        "choices[0].message.tool_calls[0].function is missing",
    ),
    (
        _answer(choices=_choice({"tool_calls": [_call(type=None)]})),
        "choices[0].message.tool_calls[0].type must be a string",
    ),
    (
        _answer(
            choices=_choice(
                {"tool_calls": [{"type": "function", "function": {"name": "t", "arguments": ""}}]}
            )
        ),
        "choices[0].message.tool_calls[0].id is missing",
    ),
    (
        _answer(choices=_choice({"tool_calls": [_call() | {"function": {"arguments": ""}}]})),
        "choices[0].message.tool_calls[0].function.name is missing",
    ),
    (_answer(choices=[{"message": {}}]), "choices[0].finish_reason is missing"),
    (_answer(choices=_choice({}, None)), "choices[0].finish_reason must be a string"),
    (
        _answer(choices=[*_choice({}), None]),
        "choices[1] must be an object",
    ),
]


@pytest.mark.parametrize(("document", "detail"), SHAPE_FAILURES)
def test_shape_failures_are_json_failures(document: Any, detail: str) -> None:
    with pytest.raises(JsonFailure) as caught:
        parse_completion(compact(document))
    assert str(caught.value) == f"invalid completion response: {detail}"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"", "Expecting value: line 1 column 1 (char 0)"),
        (b'{"a":NaN}', "NaN is not valid JSON"),
        (b'{"id":"a","id":"b"}', "duplicate key 'id'"),
        (b"\xff\xfe\xfa", None),
        (b"[" * 100_000 + b"]" * 100_000, None),
    ],
)
def test_non_json_bodies_are_json_failures(body: bytes, detail: str | None) -> None:
    with pytest.raises(JsonFailure) as caught:
        parse_completion(body)
    assert str(caught.value).startswith("invalid completion response: not JSON: ")
    if detail is not None:
        assert str(caught.value) == f"invalid completion response: not JSON: {detail}"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


def _mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A well-typed value nine times in ten, else any JSON value."""
    return st.integers(0, 9).flatmap(lambda roll: valid if roll else JSON_VALUES)


_TEXT = st.text(max_size=5)
_CALL = st.fixed_dictionaries(
    {
        "id": _mostly(_TEXT),
        "function": _mostly(
            st.fixed_dictionaries({"name": _mostly(_TEXT), "arguments": _mostly(_TEXT)})
        ),
    },
    optional={"type": _mostly(st.just("function"))},
)
_MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "content": _mostly(st.none() | _TEXT),
        "tool_calls": _mostly(st.none() | st.lists(_CALL, max_size=2)),
    },
)
_CHOICE = st.fixed_dictionaries(
    {
        "message": _mostly(_MESSAGE),
        "finish_reason": _mostly(st.sampled_from(["stop", "tool_calls", "length", "x"])),
    }
)
NEAR_VALID = st.fixed_dictionaries(
    {
        "id": _mostly(_TEXT),
        "model": _mostly(_TEXT),
        "choices": _mostly(st.lists(_CHOICE, max_size=2)),
        "usage": _mostly(
            st.fixed_dictionaries(
                {
                    "prompt_tokens": _mostly(st.integers(-1, 5)),
                    "completion_tokens": _mostly(st.integers(-1, 5)),
                    "total_tokens": _mostly(st.integers(-1, 10)),
                }
            )
        ),
    }
)


def _parse_never_crashes(body: bytes) -> str:
    """Parse `body`; what became of it: `refused` (a clear error) or the finish reason."""
    try:
        completion = parse_completion(body)
    except (BramaError, JsonFailure):
        return "refused"
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    assert completion.finish_reason in ("stop", "tool_calls")
    assert (completion.finish_reason == "tool_calls") == bool(completion.tool_calls)
    return completion.finish_reason


def test_parser_never_crashes_on_any_json() -> None:
    reached = Reached("refused", "stop", "tool_calls")

    # Random documents are almost never whole completions: these make sure both are parsed.
    @settings(max_examples=200)
    @example(_answer())
    @example(
        _answer(
            choices=_choice(
                {"role": "assistant", "content": None, "tool_calls": [_call()]}, "tool_calls"
            )
        )
    )
    @given(JSON_VALUES | NEAR_VALID)
    def one_document(document: Any) -> None:
        reached.note(_parse_never_crashes(compact(document).encode()))

    one_document()
    reached.assert_all()


@given(st.binary())
def test_parser_never_crashes_on_any_bytes(body: bytes) -> None:
    _parse_never_crashes(body)
