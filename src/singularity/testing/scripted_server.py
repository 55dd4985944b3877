"""A scripted OpenAI-compatible gateway over real HTTP, for tests and for trying a setup.

    with ScriptedServer([Turn.tool_call("note", {"a": 1}), Turn.text("done")]) as server:
        client = BramaClient(server.url, agent_id="a", auth=Auth.none())

Serves `GET health`, `GET v1/models` and `POST v1/chat/completions`; each completion
consumes the next turn of the script. When the script runs out, the `default` turn
answers (a plain `idle` text unless told otherwise; `default=None` answers 500
`script exhausted`), so a being can keep living on a finished script. Tool-call
turns answer `content: null` as OpenAI does. Every request is recorded in
`.requests`, including refused ones. With `hmac_secret` the completion headers are
verified (`verify_hmac`) and a bad signature gets 401 without consuming a turn.
`health` (a JSON object, or raw bytes) and `health_status` set the health answer;
`serves_health=False` answers 404 there, as servers without that route do.
With `openai_strict` the server holds requests to OpenAI's rule for tool messages (every
call of an assistant message answered by the tool messages right after it, and no tool
message without such a call) and answers 400 as OpenAI does, without consuming a turn.

A script file is a JSON array of turns, or `{"turns": [...], "default": turn | null,
"models": [ids]}`. A turn is one of `{"text": "..."}`, `{"tool_calls": [{"name":
"...", "arguments": {...} or "raw", "id": "..."}]}`, `{"error": {"status": 500,
"message": "..."}}`, `{"raw": "body", "status": 200}`, `{"response": {...}}`,
`{"drop": true}`, with optional `delay` (seconds), `usage`, `finish_reason`,
`model`, `content` where they apply.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import pydantic_core

from singularity.gateway.auth import Secret, verify_hmac
from singularity.jsoncodec import compact

GATE_POLL_SECS = 0.05
"""How often a held answer looks whether the server is stopping."""

JsonObject = dict[str, Any]


class ScriptError(ValueError):
    """A script file or script entry is not valid."""


@dataclass(frozen=True)
class Call:
    """One scripted tool call; `arguments` is the raw JSON text sent to the client."""

    name: str
    arguments: str = "{}"
    id: str | None = None


def _arguments_text(arguments: Mapping[str, Any] | str | None) -> str:
    if arguments is None:
        return "{}"
    return arguments if isinstance(arguments, str) else compact(dict(arguments))


@dataclass(frozen=True)
class Turn:
    """One scripted answer to a completion request; build it with the class methods."""

    kind: str
    content: str | None = None
    calls: tuple[Call, ...] = ()
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    model: str | None = None
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay: float = 0.0
    gate: threading.Event | None = field(default=None, compare=False)

    @classmethod
    def text(
        cls,
        content: str,
        *,
        finish_reason: str = "stop",
        usage: Mapping[str, Any] | None = None,
        model: str | None = None,
    ) -> Turn:
        """A plain answer; `usage` replaces the computed usage object verbatim."""
        return cls("text", content, (), finish_reason, usage, model)

    @classmethod
    def tool_call(
        cls, name: str, arguments: Mapping[str, Any] | str | None = None, *, call_id: str = ""
    ) -> Turn:
        """One tool call; dict arguments are sent as compact JSON text."""
        return cls.tool_calls(Call(name, _arguments_text(arguments), call_id or None))

    @classmethod
    def tool_calls(
        cls,
        *calls: Call,
        content: str | None = None,
        finish_reason: str = "tool_calls",
        usage: Mapping[str, Any] | None = None,
        model: str | None = None,
    ) -> Turn:
        """Several tool calls in one answer; `content` null as OpenAI sends it."""
        return cls("tool_calls", content, calls, finish_reason, usage, model)

    @classmethod
    def error(cls, status: int, message: str = "scripted error", *, error_type: str = "") -> Turn:
        """An HTTP error with an OpenAI-style `{"error": {...}}` body."""
        return cls("raw", status=status, body=_error_body(status, message, error_type))

    @classmethod
    def raw(
        cls, body: bytes | str, *, status: int = 200, content_type: str = "application/json"
    ) -> Turn:
        """Exactly these bytes as the response body (malformed answers)."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        return cls("raw", status=status, body=data, content_type=content_type)

    @classmethod
    def response(cls, document: Mapping[str, Any], *, status: int = 200) -> Turn:
        """This JSON document as the response body (contract violations)."""
        return cls.raw(compact(dict(document)), status=status)

    @classmethod
    def drop(cls) -> Turn:
        """Read the request, then close the connection without answering."""
        return cls("drop")

    def delayed(self, seconds: float) -> Turn:
        """The same turn, answered after `seconds`."""
        return dataclasses.replace(self, delay=seconds)

    def held(self, gate: threading.Event) -> Turn:
        """The same turn, answered once `gate` is set (a call kept in flight by a test)."""
        return dataclasses.replace(self, gate=gate)

    @classmethod
    def from_json(cls, entry: Any) -> Turn:
        """A turn from its script-file form (see the module docstring)."""
        if not isinstance(entry, dict):
            raise ScriptError(f"a turn must be an object, got {compact(entry)}")
        kinds = [key for key in _BUILDERS if key in entry]
        if len(kinds) != 1 or set(entry) - set(_BUILDERS) - _OPTIONS:
            raise ScriptError(
                f"a turn needs exactly one of {', '.join(_BUILDERS)}: {compact(entry)}"
            )
        try:
            turn = _BUILDERS[kinds[0]](entry)
            return turn.delayed(float(entry.get("delay", 0.0)))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ScriptError(f"invalid turn {compact(entry)}: {error}") from None


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {compact(value)}")
    return value


def _answer_options(entry: JsonObject) -> JsonObject:
    return {key: entry[key] for key in ("usage", "finish_reason", "model") if key in entry}


def _calls(entry: JsonObject) -> Turn:
    calls = [
        Call(_text(c["name"]), _arguments_text(c.get("arguments")), c.get("id"))
        for c in entry["tool_calls"]
    ]
    return Turn.tool_calls(*calls, content=entry.get("content"), **_answer_options(entry))


_BUILDERS: dict[str, Callable[[JsonObject], Turn]] = {
    "text": lambda e: Turn.text(_text(e["text"]), **_answer_options(e)),
    "tool_calls": _calls,
    "error": lambda e: Turn.error(
        int(e["error"]["status"]), _text(e["error"].get("message", "scripted error"))
    ),
    "raw": lambda e: Turn.raw(
        _text(e["raw"]),
        status=int(e.get("status", 200)),
        content_type=_text(e.get("content_type", "application/json")),
    ),
    "response": lambda e: Turn.response(e["response"], status=int(e.get("status", 200))),
    "drop": lambda e: Turn.drop(),
}
_OPTIONS = {"delay", "usage", "finish_reason", "model", "content", "status", "content_type"}


IDLE = Turn.text("idle")


@dataclass(frozen=True)
class Script:
    """A loaded script file: turns, the turn after they run out, advertised models."""

    turns: list[Turn]
    default: Turn | None = IDLE
    models: list[str] = field(default_factory=lambda: ["scripted-model"])


def load_script(path: str | Path) -> Script:
    """Read a script file (JSON); raises `ScriptError` with the reason."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ScriptError(f"cannot read script {path}: {error}") from None
    if isinstance(document, list):
        return Script([Turn.from_json(entry) for entry in document])
    if not isinstance(document, dict) or not isinstance(document.get("turns"), list):
        raise ScriptError("a script is an array of turns or an object with a turns array")
    default = document.get("default", "idle")
    models = document.get("models", ["scripted-model"])
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise ScriptError("models must be an array of strings")
    return Script(
        turns=[Turn.from_json(entry) for entry in document["turns"]],
        default=IDLE if default == "idle" else None if default is None else Turn.from_json(default),
        models=models,
    )


def _error_body(
    status: int,
    message: str,
    error_type: str = "",
    code: str | None = None,
    param: str | None = None,
) -> bytes:
    kind = error_type or ("server_error" if status >= 500 else "invalid_request_error")
    error = {"message": message, "type": kind, "param": param, "code": code}
    return compact({"error": error}).encode("utf-8")


def tool_message_violation(messages: Any) -> tuple[str, str] | None:
    """OpenAI's refusal of a request whose tool messages break its rule: (message, param).

    Each assistant message with `tool_calls` must be followed by tool messages answering
    each of its call ids, and a tool message must answer a call of the assistant message
    before it. None when the messages keep the rule (or are not a list of objects).
    """
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return None
    index = 0
    while index < len(messages):
        message = messages[index]
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if message.get("role") == "tool":
            return (
                "Invalid parameter: messages with role 'tool' must be a response to a "
                "preceeding message with 'tool_calls'.",
                f"messages.[{index}].role",
            )
        index += 1
        if not isinstance(calls, list) or not calls:
            continue
        answered = set()
        while index < len(messages) and messages[index].get("role") == "tool":
            answered.add(messages[index].get("tool_call_id"))
            index += 1
        ids = [call.get("id") for call in calls if isinstance(call, dict)]
        missing = [str(call_id) for call_id in ids if call_id not in answered]
        if missing:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not "
                f"have response messages: {', '.join(missing)}",
                "messages",
            )
    return None


def parsed(body: bytes) -> Any:
    """The JSON document of a request body, None when it is not JSON.

    Parsed by pydantic-core (native code, as a real model server parses; about half the
    json module's time on a full being's bodies, bench/README.md); what it refuses and the
    json module reads (a lone surrogate escape, a BOM, UTF-16) is read by the json module,
    so the documents recorded are the same as before.
    """
    if not body:
        return None
    try:
        return pydantic_core.from_json(body, cache_strings=False)
    except ValueError:
        pass
    try:
        return json.loads(body)
    except ValueError:
        return None


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received; `json` is None when the body is not JSON."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any


class _Http(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # An answer is written as headers, then body: with Nagle's algorithm the body waits
    # for the client's delayed acknowledgement of the headers, ~40 ms on every request.
    disable_nagle_algorithm = True
    server: _Http

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        self.server.owner._track(self.connection, add=False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the recorded requests are the log."""

    def do_GET(self) -> None:
        self.server.owner._handle(self)

    def do_POST(self) -> None:
        self.server.owner._handle(self)

    def reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class ScriptedServer:
    """The scripted gateway; a context manager (sync and async) serving on 127.0.0.1."""

    def __init__(
        self,
        turns: Iterable[Turn] = (),
        *,
        default: Turn | None = IDLE,
        models: Iterable[str] = ("scripted-model",),
        hmac_secret: Secret | str | None = None,
        agent_id: str | None = None,
        bearer_token: str | None = None,
        clock: Callable[[], float] = time.time,
        window_seconds: int = 300,
        health: Mapping[str, Any] | bytes | None = None,
        health_status: int = 200,
        serves_health: bool = True,
        base_path: str = "/",
        openai_strict: bool = False,
    ) -> None:
        self._script: collections.deque[Turn] = collections.deque(turns)
        self.default = default
        self.models = list(models)
        self._secret = Secret(hmac_secret) if isinstance(hmac_secret, str) else hmac_secret
        self._agent_id = agent_id
        self._bearer = bearer_token
        self._clock = clock
        self._window = window_seconds
        document = {"status": "ok"} if health is None else health
        self._health = document if isinstance(document, bytes) else compact(dict(document)).encode()
        self._health_status = health_status
        self._serves_health = serves_health
        self._base = "/" + base_path.strip("/") + "/" if base_path.strip("/") else "/"
        self.openai_strict = openai_strict
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._connections: set[socket.socket] = set()
        self._numbers = itertools.count(1)
        self._stopping = threading.Event()
        self._http: _Http | None = None
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []

    @classmethod
    def from_file(cls, path: str | Path, **options: Any) -> ScriptedServer:
        """A server playing the script file at `path`."""
        script = load_script(path)
        options.setdefault("default", script.default)
        options.setdefault("models", script.models)
        return cls(script.turns, **options)

    @property
    def url(self) -> str:
        """The base URL, with a trailing slash."""
        if self._http is None:
            raise RuntimeError("the scripted server is not running")
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}{self._base}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._requests)

    @property
    def completions(self) -> list[RecordedRequest]:
        """The completion requests received so far."""
        return [r for r in self.requests if r.path.endswith("v1/chat/completions")]

    @property
    def remaining(self) -> int:
        """How many scripted turns are left."""
        with self._lock:
            return len(self._script)

    def add(self, *turns: Turn) -> None:
        """Append turns to the script."""
        with self._lock:
            self._script.extend(turns)

    def start(self) -> ScriptedServer:
        """Bind 127.0.0.1 on a free port and serve in a background thread."""
        self._stopping.clear()
        self._http = _Http(("127.0.0.1", 0), _Handler)
        self._http.owner = self
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close every connection."""
        self._stopping.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedServer:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Shutdown waits for the serving thread; keep the event loop free meanwhile.
        await asyncio.to_thread(self.stop)

    def _track(self, connection: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def _record(self, handler: _Handler, body: bytes) -> RecordedRequest:
        headers = {name.lower(): value for name, value in handler.headers.items()}
        request = RecordedRequest(handler.command, handler.path, headers, body, parsed(body))
        with self._lock:
            self._requests.append(request)
        return request

    def _handle(self, handler: _Handler) -> None:
        try:
            length = int(handler.headers.get("Content-Length") or 0)
            self._serve(handler, handler.rfile.read(length) if length > 0 else b"")
        except Exception as error:  # a test server must report, not die
            self.errors.append(error)
            handler.drop()

    def _serve(self, handler: _Handler, body: bytes) -> None:
        """Record and answer one request whose body has arrived."""
        self._route(handler, self._record(handler, body))

    def _route(self, handler: _Handler, request: RecordedRequest) -> None:
        path = request.path.split("?", 1)[0]
        route = path[len(self._base) :] if path.startswith(self._base) else None
        if self._bearer is not None and request.headers.get("authorization") != (
            f"Bearer {self._bearer}"
        ):
            handler.reply(401, _error_body(401, "invalid bearer token", "authentication_error"))
        elif (request.method, route) == ("GET", "health") and self._serves_health:
            handler.reply(self._health_status, self._health)
        elif (request.method, route) == ("GET", "v1/models"):
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "scripted"}
                for m in self.models
            ]
            handler.reply(200, compact({"object": "list", "data": data}).encode("utf-8"))
        elif (request.method, route) == ("POST", "v1/chat/completions"):
            self._complete(handler, request)
        else:
            handler.reply(404, _error_body(404, f"no route for {request.method} {path}"))

    def _complete(self, handler: _Handler, request: RecordedRequest) -> None:
        if self._secret is not None:
            verdict = verify_hmac(
                request.headers,
                request.body,
                self._secret,
                clock=self._clock,
                window_seconds=self._window,
                expected_agent_id=self._agent_id,
            )
            if not verdict.ok:
                message = f"invalid signature: {verdict.reason}"
                handler.reply(401, _error_body(401, message, "authentication_error"))
                return
        if not isinstance(request.json, dict):
            handler.reply(400, _error_body(400, "request body must be a JSON object"))
            return
        violation = (
            tool_message_violation(request.json.get("messages")) if self.openai_strict else None
        )
        if violation is not None:
            handler.reply(400, _error_body(400, violation[0], param=violation[1]))
            return
        with self._lock:
            turn = self._script.popleft() if self._script else self.default
        if turn is None:
            handler.reply(500, _error_body(500, "script exhausted"))
            return
        if turn.delay > 0 and self._stopping.wait(turn.delay):
            handler.drop()
            return
        if turn.gate is not None and not self._opened(turn.gate):
            handler.drop()
            return
        if turn.kind == "drop":
            handler.drop()
        elif turn.kind == "raw":
            handler.reply(turn.status, turn.body, turn.content_type)
        else:
            handler.reply(200, compact(self._completion(turn, request)).encode("utf-8"))

    def _opened(self, gate: threading.Event) -> bool:
        """Wait for `gate`; False when the server stops first."""
        while not gate.wait(GATE_POLL_SECS):
            if self._stopping.is_set():
                return False
        return True

    def _completion(self, turn: Turn, request: RecordedRequest) -> JsonObject:
        number = next(self._numbers)
        message: JsonObject = {"role": "assistant", "content": turn.content}
        if turn.calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{number}_{index}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for index, call in enumerate(turn.calls)
            ]
        answered = len((turn.content or "").encode()) + sum(len(c.arguments) for c in turn.calls)
        prompt, completion = max(1, len(request.body) // 4), max(1, answered // 4)
        requested = request.json.get("model") if isinstance(request.json, dict) else None
        return {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion",
            "created": int(self._clock()),
            "model": turn.model or (requested if isinstance(requested, str) else "scripted-model"),
            "choices": [{"index": 0, "message": message, "finish_reason": turn.finish_reason}],
            "usage": dict(turn.usage)
            if turn.usage is not None
            else {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
