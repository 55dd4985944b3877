"""The embedded gateway over HTTP: response contract, HMAC, queue, malformed requests, a being.

Most cases drive the app in-process (httpx's ASGI transport) with a scripted engine,
so they are fast and can block the worker at will. The last ones start
`singularity brama serve` as a real subprocess with the real SmolLM2 model and let a
being live three cycles against it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from singularity.errors import BramaError, RetryClass
from singularity.gateway.auth import Auth, hmac_headers
from singularity.gateway.auth import Secret as AuthSecret
from singularity.gateway.client import BramaClient
from singularity.gateway.local_model import ChatRequest, ChatResult, ContextOverflow
from singularity.gateway.routes import LOCAL_MODEL_ID, GatewayConfig, Router
from singularity.gateway.server import Gateway, ServeOptions, create_app
from singularity.tools.base import ToolDefinition

SINGULARITY = Path(sys.executable).with_name("singularity")
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

    def complete(self, request: ChatRequest) -> ChatResult:
        self.requests.append(request)
        self.running.set()
        self.release.wait(10)
        if self.fail is not None:
            raise self.fail
        if request.tools:
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": request.tools[0].name, "arguments": '{"text":"x"}'},
            }
            return ChatResult(None, [call], "tool_calls", 12, 7)
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


def test_queue_overflow_gets_429_while_health_stays_free() -> None:
    engine = ScriptedEngine()
    engine.release.clear()
    gateway = _gateway(engine, queue=1)

    async def scenario() -> tuple[list[int], int, float, int]:
        async with _http(gateway) as http:
            body = {"model": "any", "messages": HI}
            first = asyncio.create_task(http.post("/v1/chat/completions", json=body))
            await asyncio.to_thread(engine.running.wait, 5)
            second = asyncio.create_task(http.post("/v1/chat/completions", json=body))
            while gateway.pending < 2:
                await asyncio.sleep(0.01)
            third = await http.post("/v1/chat/completions", json=body)
            started = time.monotonic()
            health = await http.get("/health")
            health_secs = time.monotonic() - started
            assert health.json() == {"status": "ok"}
            engine.release.set()
            answers = await asyncio.gather(first, second)
            assert third.json()["error"]["type"] == "rate_limit_error"
            assert third.headers["retry-after"] == "1"
            after = await http.post("/v1/chat/completions", json=body)
        return [a.status_code for a in answers], third.status_code, health_secs, after.status_code

    statuses, overflow, health_secs, after = asyncio.run(scenario())
    assert (statuses, overflow, after) == ([200, 200], 429, 200)
    assert health_secs < 1.0
    assert gateway.pending == 0


def test_429_is_transient_for_the_client() -> None:
    engine = ScriptedEngine()
    engine.release.clear()
    gateway = _gateway(engine, queue=0)

    async def scenario() -> BramaError:
        async with _client(gateway) as client:
            held = asyncio.create_task(client.complete("any", HI, []))
            await asyncio.to_thread(engine.running.wait, 5)
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
    ("streaming", {"model": "any", "messages": HI, "stream": True}, 400, "streaming"),
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
        timeout=60,
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
    """`singularity brama serve` with the real SmolLM2 model and a Brama secret."""
    folder = tmp_path_factory.mktemp("brama")
    secret = folder / "brama.secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    log = folder / "brama.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [str(SINGULARITY), "brama", "serve", "--port", "0", "--secret-file", str(secret)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        url = _await_listening(process, log)
        yield url, secret
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert "Traceback" not in log.read_text(), log.read_text()


def _await_listening(process: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://\S+/)", log.read_text(errors="replace"))
        if found:
            url = found.group(1)
            while time.monotonic() < deadline:
                try:
                    if httpx.get(url + "health", timeout=2).json() == {"status": "ok"}:
                        return url
                except httpx.HTTPError:
                    time.sleep(0.05)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"brama serve did not start:\n{log.read_text()}")


def _events(state_dir: Path) -> list[dict[str, Any]]:
    lines = (state_dir / "activity.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


# The first request evaluates the whole prompt (~2,500 tokens: tools, sanctum): about
# 20 s on an idle 2-core machine, minutes on a busy one; later ones reuse the cache.
@pytest.mark.timeout(1800)
def test_a_being_lives_three_cycles_on_the_real_local_model(
    live_gateway: tuple[str, Path], tmp_path: Path
) -> None:
    url, secret = live_gateway
    state_dir, workspace = tmp_path / "being", tmp_path / "workspace"
    workspace.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("BRAMA_")}
    lived = subprocess.run(
        [
            str(SINGULARITY),
            "run",
            "--max-cycles",
            "3",
            "--brama-url",
            url,
            "--brama-secret-file",
            str(secret),
            "--state-dir",
            str(state_dir),
            "--workspace",
            str(workspace),
            "--cycle-interval-secs",
            "0",
            "--http-timeout-secs",
            "1200",
            "--input-price",
            "1",
            "--output-price",
            "4",
            "--log-format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert lived.returncode == 0, lived.stderr
    events = _events(state_dir)
    kinds = [event["type"] for event in events]
    assert kinds.count("cycle_started") == 3
    # Every answer passed the client's validation: no warning, every reservation debited.
    assert [e for e in events if e["type"] == "warning"] == []
    assert (
        kinds.count("cost_reserved")
        == kinds.count("cost_debited")
        == kinds.count("model_completed")
    )
    assert "cost_released" not in kinds
    finished = [e for e in events if e["type"] == "tool_finished"]
    assert finished, kinds
    assert any(e["status"] == "success" for e in finished), finished
    state = json.loads((state_dir / "state.json").read_text())
    usage = [e["usage"] for e in events if e["type"] == "model_completed"]
    assert all(u["prompt_tokens"] > 0 and u["completion_tokens"] > 0 for u in usage)
    assert state["budget"]["total_tokens"] == sum(u["total_tokens"] for u in usage)
    assert float(state["budget"]["api_spent"]) > 0
    assert any(message.get("tool_calls") for message in state["conversation"])
    # The arguments matched the offered schemas: the runtime refused none of them as such.
    results = [m["content"] for m in state["conversation"] if m["role"] == "tool"]
    assert results and not [r for r in results if "invalid_arguments" in r or "unknown_tool" in r]
    verified = subprocess.run(
        [str(SINGULARITY), "verify", str(state_dir)], capture_output=True, text=True, check=False
    )
    assert (verified.returncode, verified.stdout.strip()) == (0, f"{state_dir}: ok"), (
        verified.stderr
    )


def test_the_live_gateway_refuses_unsigned_completions(live_gateway: tuple[str, Path]) -> None:
    url, _ = live_gateway
    body = {"model": "any", "messages": HI}
    refused = httpx.post(url + "v1/chat/completions", json=body, timeout=10)
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    models = httpx.get(url + "v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [LOCAL_MODEL_ID]


def test_serve_without_the_local_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from singularity.cli.main import main
    from singularity.gateway import local_model

    monkeypatch.setattr(local_model.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(sys, "argv", ["singularity", "brama", "serve", "--port", "0"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert "pip install 'singularity[local]'" in capsys.readouterr().err
