"""The completion wire format: the request body (spec §9.3) and the response contract (§9.4).

Parsing runs in two steps, as the spec separates them: first the shape (anything that
is not the OpenAI completion shape is a `JsonFailure`), then the contract (a
permanent `BramaError`, except `finish_reason` `length`, which decision 6 makes
transient). Decision 6 leniencies: `content: null` is "", an empty `arguments`
string is "{}", a tool call without `type` is a `function` call. `tool_calls: null`
is read as no calls too; it breaks nothing and some servers send it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from singularity.errors import BramaError, JsonFailure, RetryClass
from singularity.jsoncodec import compact, loads_strict
from singularity.tools.base import JsonObject, ToolDefinition

FINISH_STOP: Final = "stop"
FINISH_TOOL_CALLS: Final = "tool_calls"
FINISH_LENGTH: Final = "length"


def completion_body(
    model: str,
    messages: Sequence[Mapping[str, Any]],
    max_tokens: int,
    temperature: float,
    tools: Sequence[ToolDefinition],
) -> bytes:
    """The compact UTF-8 request body, keys `model, messages, max_tokens, temperature, tools`.

    `tools` is omitted when the catalogue is empty: OpenAI refuses an empty array.
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": [dict(message) for message in messages],
        "max_tokens": max_tokens,
        "temperature": temperature,
    }
    if tools:
        body["tools"] = [tool.wire() for tool in tools]
    return compact(body).encode("utf-8")


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for; `arguments` is the raw JSON text it produced."""

    id: str
    type: str
    name: str
    arguments: str

    def wire(self) -> JsonObject:
        """The OpenAI `tool_calls` entry, as stored in an assistant message (spec §5.4)."""
        return {
            "id": self.id,
            "type": self.type,
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Usage:
    """Token usage; `total_tokens` is always prompt + completion, whatever was reported."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(frozen=True)
class Completion:
    """One validated model answer."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = FINISH_STOP
    usage: Usage = field(default_factory=lambda: Usage(0, 0, 0))
    model: str = ""
    id: str = ""


class _Shape(Exception):
    """A shape violation found while reading a response; becomes a `JsonFailure`."""


def _field(obj: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise _Shape(f"{where}{key} is missing")
    return obj[key]


def _string(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = _field(obj, key, where)
    if not isinstance(value, str):
        raise _Shape(f"{where}{key} must be a string")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _Shape(f"{where} must be an object")
    return value


def _count(obj: Mapping[str, Any], key: str) -> int:
    value = _field(obj, key, "usage.")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Shape(f"usage.{key} must be a non-negative integer")
    return value


def _tool_call(value: Any, where: str) -> ToolCall:
    call = _object(value, where)
    kind = call.get("type", "function")
    if not isinstance(kind, str):
        raise _Shape(f"{where}.type must be a string")
    function = _object(_field(call, "function", f"{where}."), f"{where}.function")
    arguments = _string(function, "arguments", f"{where}.function.")
    return ToolCall(
        id=_string(call, "id", f"{where}."),
        type=kind,
        name=_string(function, "name", f"{where}.function."),
        arguments=arguments or "{}",
    )


@dataclass(frozen=True)
class _Choice:
    content: str
    tool_calls: list[ToolCall]
    finish_reason: str


def _choice(value: Any, where: str) -> _Choice:
    choice = _object(value, where)
    message = _object(_field(choice, "message", f"{where}."), f"{where}.message")
    content = message.get("content")
    if content is None:
        content = ""
    elif not isinstance(content, str):
        raise _Shape(f"{where}.message.content must be a string or null")
    raw_calls = message.get("tool_calls")
    if raw_calls is None:
        raw_calls = []
    elif not isinstance(raw_calls, list):
        raise _Shape(f"{where}.message.tool_calls must be an array")
    calls = [
        _tool_call(call, f"{where}.message.tool_calls[{index}]")
        for index, call in enumerate(raw_calls)
    ]
    return _Choice(content, calls, _string(choice, "finish_reason", f"{where}."))


@dataclass(frozen=True)
class _Response:
    id: str
    model: str
    choices: list[_Choice]
    prompt_tokens: int
    completion_tokens: int
    reported_total: int


def _shape(document: Any) -> _Response:
    top = _object(document, "the response")
    identifier = _string(top, "id", "")
    model = _string(top, "model", "")
    raw_choices = _field(top, "choices", "")
    if not isinstance(raw_choices, list):
        raise _Shape("choices must be an array")
    usage = _object(_field(top, "usage", ""), "usage")
    return _Response(
        id=identifier,
        model=model,
        choices=[_choice(choice, f"choices[{index}]") for index, choice in enumerate(raw_choices)],
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        reported_total=_count(usage, "total_tokens"),
    )


def _contract(response: _Response) -> Completion:
    if len(response.choices) != 1:
        raise BramaError("response must contain exactly one choice", retry=RetryClass.PERMANENT)
    choice = response.choices[0]
    reason = choice.finish_reason
    if reason == FINISH_TOOL_CALLS and not choice.tool_calls:
        raise BramaError("tool_calls finish reason without calls", retry=RetryClass.PERMANENT)
    if reason == FINISH_STOP and choice.tool_calls:
        raise BramaError("stop finish reason with tool calls", retry=RetryClass.PERMANENT)
    if reason not in (FINISH_STOP, FINISH_TOOL_CALLS):
        # Decision 6: a truncated answer may succeed next cycle, so only `length` is transient.
        retry = RetryClass.TRANSIENT if reason == FINISH_LENGTH else RetryClass.PERMANENT
        raise BramaError(f"unsupported finish reason: {reason}", retry=retry)
    total = response.prompt_tokens + response.completion_tokens
    if response.reported_total != 0 and response.reported_total != total:
        raise BramaError(
            "usage total does not match prompt plus completion", retry=RetryClass.PERMANENT
        )
    return Completion(
        content=choice.content,
        tool_calls=choice.tool_calls,
        finish_reason=reason,
        usage=Usage(response.prompt_tokens, response.completion_tokens, total),
        model=response.model,
        id=response.id,
    )


def parse_completion(body: bytes | str) -> Completion:
    """Read and validate a completion response body (spec §9.4 with decision 6)."""
    try:
        document = loads_strict(body)
    except (ValueError, RecursionError) as error:
        raise JsonFailure(f"invalid completion response: not JSON: {error}") from None
    try:
        response = _shape(document)
    except _Shape as error:
        raise JsonFailure(f"invalid completion response: {error}") from None
    return _contract(response)
