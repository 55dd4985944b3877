"""The embedded gateway's HTTP app: health, model list, chat completions (decisions 7, 23).

Completions for the local model run on one worker thread, one at a time; at most
`queue_size` more may wait, and any beyond get 429 (transient for the client), so
the event loop stays free for `health` and for upstream routes. Authentication: with a
Brama secret a completion may carry valid HMAC headers (§9.2) within the timestamp
window; with an API key it may carry `Authorization: Bearer <key>`; with either
configured, a completion that has neither valid gets 401, and so does `v1/models`
without the key when a key is the only credential. `stream: true` is answered with
OpenAI's server-sent chunks (`streaming`); `response_format` `json_object` and
`json_schema` are decoded under a grammar, and refused with 400 when the request also
lets the model call tools. Every refusal is an OpenAI-style `{"error": {...}}` body.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Protocol

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route as HttpRoute

from singularity.gateway.auth import DEFAULT_WINDOW_SECONDS, Secret, verify_hmac
from singularity.gateway_server import streaming
from singularity.gateway_server.forwarding import error_body, forward, forward_stream
from singularity.gateway_server.local_model import (
    ChatRequest,
    ChatResult,
    ContextOverflow,
    UnusableSchema,
)
from singularity.gateway_server.routes import Route, Router, UnknownModel
from singularity.gateway_server.tool_grammar import ToolSpec
from singularity.jsoncodec import compact, loads_strict

log = logging.getLogger(__name__)
MAX_BODY_BYTES: Final = 4 * 1024 * 1024
ROLES: Final = ("system", "developer", "user", "assistant", "tool")
TOOL_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


TextSink = Callable[[str], None]


class Engine(Protocol):
    """The local model as the app uses it: one blocking call per completion.

    `on_text`, when given, receives the answer's text as it is decoded (what may be
    shown before the answer is complete); the result is the whole answer all the same.
    """

    def complete(self, request: ChatRequest, on_text: TextSink | None = None) -> ChatResult: ...


@dataclass(frozen=True)
class ServeOptions:
    """Authentication and limits of the app."""

    secret: Secret | None = None
    api_key: Secret | None = None
    agent_id: str | None = None
    window_seconds: int = DEFAULT_WINDOW_SECONDS
    clock: Callable[[], float] = time.time


class Refusal(Exception):
    """A request the gateway answers with an error status and an OpenAI-style body."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code

    def response(self) -> Response:
        """The error response."""
        headers = {"retry-after": "1"} if self.status == 429 else None
        body = error_body(self.message, self.kind, self.code)
        return Response(body, self.status, headers, media_type="application/json")


def _bad(message: str, code: str | None = None) -> Refusal:
    return Refusal(400, message, code=code)


def _content_ok(content: Any) -> bool:
    if content is None or isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict) and isinstance(part.get("type"), str) for part in content
    )


def _message(value: Any, index: int) -> Mapping[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(value, dict):
        raise _bad(f"{where} must be an object")
    if value.get("role") not in ROLES:
        raise _bad(f"{where}.role must be one of {', '.join(ROLES)}")
    if not _content_ok(value.get("content")):
        raise _bad(f"{where}.content must be a string, an array of parts or null")
    calls = value.get("tool_calls")
    if calls is not None and not (
        isinstance(calls, list)
        and all(isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls)
    ):
        raise _bad(f"{where}.tool_calls must be an array of function calls")
    return value


def _tool(value: Any, index: int) -> ToolSpec:
    where = f"tools[{index}]"
    function = value.get("function") if isinstance(value, dict) else None
    if not isinstance(function, dict) or value.get("type", "function") != "function":
        raise _bad(f"{where} must be {{'type': 'function', 'function': {{...}}}}")
    name, parameters = function.get("name"), function.get("parameters", {"type": "object"})
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise _bad(f"{where}.function.name must match [A-Za-z0-9_-]{{1,64}}")
    if not isinstance(parameters, dict):
        raise _bad(f"{where}.function.parameters must be a JSON schema object")
    description = function.get("description", "")
    if not isinstance(description, str):
        raise _bad(f"{where}.function.description must be a string")
    return ToolSpec(name, description, parameters)


def _number(document: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = document.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise _bad(f"{key} must be a number from {low:g} to {high:g}")
    return float(value)


def response_schema(document: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema an answer must satisfy under `response_format`, if any, or a 400."""
    requested = document.get("response_format")
    if requested is None:
        return None
    kind = requested.get("type") if isinstance(requested, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = requested.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise _bad("response_format.json_schema.schema must be a JSON schema object")
        return schema
    raise _bad("response_format.type must be text, json_object or json_schema")


def chat_request(document: Mapping[str, Any]) -> ChatRequest:
    """A validated `ChatRequest` from a request body, or a 400 `Refusal`."""
    messages = document.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty array")
    tools = document.get("tools")
    if not isinstance(tools, list | None):
        raise _bad("tools must be an array")
    specs = [_tool(t, i) for i, t in enumerate(tools or [])]
    choice = document.get("tool_choice")
    if not (
        choice in (None, "none", "auto", "required")
        or (isinstance(choice, dict) and isinstance(choice.get("function"), dict))
    ):
        raise _bad("tool_choice must be none, auto, required or a named function")
    if isinstance(choice, dict) and choice["function"].get("name") not in {t.name for t in specs}:
        raise _bad(f"tool_choice names {choice['function'].get('name')!r}, not an offered tool")
    limit = document.get("max_completion_tokens", document.get("max_tokens"))
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise _bad("max_tokens must be a positive integer")
    if document.get("n", 1) != 1:
        raise _bad("n must be 1")
    temperature = _number(document, "temperature", 0, 2)
    return ChatRequest(
        messages=[_message(m, i) for i, m in enumerate(messages)],
        tools=specs,
        tool_choice=choice,
        max_tokens=limit,
        temperature=0.2 if temperature is None else temperature,
        response_format=response_schema(document),
    )


def _locally_servable(chat: ChatRequest) -> None:
    """A 400 for what the local model cannot honour: a JSON answer while tools are allowed."""
    if chat.response_format is not None and chat.tools and chat.tool_choice != "none":
        raise _bad(
            "response_format json_object or json_schema cannot be combined with tools on "
            "the local model: send tool_choice none, or no tools",
            "unsupported_response_format",
        )


def completion_document(model: str, result: ChatResult) -> dict[str, Any]:
    """The §9.4 response for one local answer."""
    message: dict[str, Any] = {"role": "assistant", "content": result.content}
    if result.tool_calls:
        message["tool_calls"] = result.tool_calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": result.finish_reason}],
        "usage": {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
        },
    }


class Gateway:
    """The app's state: routes, the local engine and its worker, upstream client, auth."""

    def __init__(
        self,
        router: Router,
        engine: Engine | None,
        options: ServeOptions | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.router = router
        self.engine = engine
        self.options = options or ServeOptions()
        self.http = http
        self.capacity = 1 + router.config.queue_size
        self.pending = 0
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="brama-model")

    def has_key(self, request: Request) -> bool:
        """Whether the request carries the configured API key as a bearer token."""
        key = self.options.api_key
        if key is None:
            return False
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        expected = key.reveal().encode()
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected)

    def authenticate(self, request: Request, body: bytes) -> None:
        """401 unless the bearer key or the HMAC headers are valid (when either is set)."""
        secret, key = self.options.secret, self.options.api_key
        if (secret is None and key is None) or self.has_key(request):
            return
        if secret is None:
            raise Refusal(
                401, "missing or invalid API key", "authentication_error", "invalid_api_key"
            )
        verdict = verify_hmac(
            request.headers,
            body,
            secret,
            clock=self.options.clock,
            window_seconds=self.options.window_seconds,
            expected_agent_id=self.options.agent_id,
        )
        if not verdict.ok:
            raise Refusal(401, f"invalid signature: {verdict.reason}", "authentication_error")

    def authenticate_read(self, request: Request) -> None:
        """401 for `v1/models` without the key when a key is the only credential."""
        only_key = self.options.api_key is not None and self.options.secret is None
        if only_key and not self.has_key(request):
            raise Refusal(
                401, "missing or invalid API key", "authentication_error", "invalid_api_key"
            )

    async def run_local(self, request: ChatRequest, on_text: TextSink | None = None) -> ChatResult:
        """Run one completion on the worker, or 429 when the queue is full."""
        if self.engine is None:
            raise Refusal(500, "no local model is loaded", "server_error")
        if self.pending >= self.capacity:
            raise Refusal(
                429,
                "the local model is busy; retry shortly",
                "rate_limit_error",
                "rate_limit_exceeded",
            )
        loop = asyncio.get_running_loop()
        future = self.worker.submit(self.engine.complete, request, on_text)
        self.pending += 1
        # Released when the job really ends, even if this request is cancelled meanwhile.
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(self._release))
        return await asyncio.wrap_future(future)

    def _release(self) -> None:
        self.pending -= 1

    async def complete(self, request: Request) -> Response:
        """`POST v1/chat/completions`."""
        body = await _body(request)
        self.authenticate(request, body)
        try:
            document = loads_strict(body)
        except (ValueError, RecursionError):
            raise _bad("the request body is not valid JSON") from None
        if not isinstance(document, dict):
            raise _bad("the request body must be a JSON object")
        stream = document.get("stream", False)
        if not isinstance(stream, bool):
            raise _bad("stream must be a boolean")
        model = document.get("model")
        if not isinstance(model, str) or not model:
            raise _bad("model must be a non-empty string")
        try:
            route = self.router.resolve(model)
        except UnknownModel:
            raise Refusal(
                404, f"the model {model} does not exist", code="model_not_found"
            ) from None
        chat = chat_request(document)
        if route.upstream is not None:
            return await self._upstream(route, document, stream)
        _locally_servable(chat)
        if stream:
            return await self._stream_local(route, chat, _include_usage(document))
        result = await self._answer(chat)
        return _json(completion_document(route.id, result))

    async def _answer(self, chat: ChatRequest, on_text: TextSink | None = None) -> ChatResult:
        try:
            return await self.run_local(chat, on_text)
        except ContextOverflow as error:
            raise _bad(str(error), "context_length_exceeded") from None
        except UnusableSchema as error:
            raise _bad(str(error), "invalid_response_format") from None

    async def _upstream(self, route: Route, document: Mapping[str, Any], stream: bool) -> Response:
        if self.http is None:
            raise Refusal(500, "no upstream client", "server_error")
        if stream:
            status, chunks = await forward_stream(self.http, route, document)
            kind = "text/event-stream" if status == 200 else "application/json"
            return StreamingResponse(chunks, status, media_type=kind)
        answer = await forward(self.http, route, document)
        return Response(answer.body, answer.status, media_type="application/json")

    async def _stream_local(self, route: Route, chat: ChatRequest, usage: bool) -> Response:
        """Stream the answer: text as it is decoded, then the calls, the end and usage.

        The first chunk waits for the first safe piece of text or the end, so that a
        refusal (429, 400) is still an ordinary error response.
        """
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[str | None] = asyncio.Queue()
        gate = streaming.TextGate()

        def on_text(delta: str) -> None:
            piece = gate.feed(delta)
            if piece:
                loop.call_soon_threadsafe(pieces.put_nowait, piece)

        job = asyncio.ensure_future(self._answer(chat, on_text))
        job.add_done_callback(lambda _: pieces.put_nowait(None))
        first = await pieces.get()
        if first is None:
            job.result()  # a refusal raises here, before any byte was sent
        chunks = streaming.Chunks(f"chatcmpl-{uuid.uuid4().hex}", route.id)

        async def events() -> AsyncIterator[bytes]:
            yield chunks.opening()
            piece = first
            while piece is not None:
                yield chunks.text(piece)
                piece = await pieces.get()
            try:
                result = await job
            except Refusal as refusal:
                yield streaming.error_event(refusal.message, refusal.kind)
                return
            rest = gate.rest(result.content or "")
            if rest:
                yield chunks.text(rest)
            for call in chunks.calls(result.tool_calls):
                yield call
            yield chunks.chunk({}, result.finish_reason)
            if usage:
                yield chunks.usage(result.prompt_tokens, result.completion_tokens)
            yield streaming.DONE

        return StreamingResponse(events(), media_type="text/event-stream")

    def models(self) -> Response:
        """`GET v1/models`."""
        data = [
            {
                "id": route.id,
                "object": "model",
                "created": 0,
                "owned_by": route.upstream.name if route.upstream else "local",
            }
            for route in self.router.routes.values()
        ]
        return _json({"object": "list", "data": data})


def _include_usage(document: Mapping[str, Any]) -> bool:
    options = document.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("stream_options must be an object")
    return bool(options and options.get("include_usage"))


def _json(document: Any, status: int = 200) -> Response:
    return Response(compact(document), status, media_type="application/json")


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise Refusal(413, f"the request body exceeds {MAX_BODY_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > MAX_BODY_BYTES:
            raise Refusal(413, f"the request body exceeds {MAX_BODY_BYTES} bytes")
    return bytes(body)


def create_app(gateway: Gateway) -> Starlette:
    """The Starlette app serving `gateway`."""

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> Response:
        try:
            gateway.authenticate_read(request)
        except Refusal as refusal:
            return refusal.response()
        return gateway.models()

    async def completions(request: Request) -> Response:
        try:
            return await gateway.complete(request)
        except Refusal as refusal:
            return refusal.response()
        except Exception:  # a request must never take the server down
            log.exception("completion failed")
            return Refusal(500, "the gateway failed to answer", "server_error").response()

    async def http_error(request: Request, error: Exception) -> Response:
        status = error.status_code if isinstance(error, HTTPException) else 500
        detail = error.detail if isinstance(error, HTTPException) else "internal error"
        return Refusal(status, f"{detail}: {request.method} {request.url.path}").response()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if gateway.http is not None:
                await gateway.http.aclose()
            close = getattr(gateway.engine, "close", None)
            if close is not None:
                close()
            gateway.worker.shutdown(wait=False, cancel_futures=True)

    return Starlette(
        routes=[
            HttpRoute("/health", health, methods=["GET"]),
            HttpRoute("/v1/models", models, methods=["GET"]),
            HttpRoute("/v1/chat/completions", completions, methods=["POST"]),
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )


def run_gateway(
    router: Router,
    sock: socket.socket,
    *,
    secret: Secret | None,
    agent_id: str | None,
    api_key: Secret | None = None,
) -> None:
    """Load the local model (if enabled) and serve on the bound socket until a signal."""
    import uvicorn

    from singularity.gateway_server.local_model import LocalModel

    engine = LocalModel(router.config.local) if router.config.local.enabled else None
    options = ServeOptions(secret=secret, api_key=api_key, agent_id=agent_id)
    gateway = Gateway(router, engine, options, httpx.AsyncClient())
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    auth = " and ".join(
        name for name, value in (("HMAC", secret), ("API key", api_key)) if value is not None
    )
    print(
        f"brama: listening on http://{shown}:{port}/ models: {', '.join(router.model_ids)}; "
        f"auth: {auth or 'none (loopback only)'}; queue: {router.config.queue_size}",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(
        create_app(gateway), log_level="warning", access_log=False, timeout_graceful_shutdown=5
    )
    uvicorn.Server(config).run(sockets=[sock])
