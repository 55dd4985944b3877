"""The completion wire format: the request body (spec §9.3) and the response contract (§9.4).

Parsing runs in two steps, as the spec separates them: first the shape (anything that
is not the OpenAI completion shape is a `JsonFailure`), then the contract (a
`BramaError`). Decision 6 leniencies: `content: null` is "", an empty `arguments`
string is "{}", a tool call without `type` is a `function` call. `tool_calls: null`
is read as no calls too; it breaks nothing and some servers send it.

Decision 22, the replies real servers send: tool calls are run whatever the
`finish_reason` (OpenAI with a named `tool_choice`, older vLLM and SGLang answer
`stop`); `length` with text keeps the text (`Completion.truncated`); `length` that cut
a tool call's arguments, or left nothing at all, is transient; a reply without `usage`
(or `usage: null`) has `usage` None, and the cycle charges its reservation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from singularity.domain.events import Usage
from singularity.errors import BramaError, JsonFailure, RetryClass
from singularity.gateway.encoding import EncodedMessages, WireCache, pieces_of
from singularity.jsoncodec import compact_utf8, loads_strict
from singularity.secrets import Scrubber
from singularity.text import safe_json
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
    tool_choice: str | None = None,
    *,
    cache: WireCache | None = None,
) -> bytes:
    """The compact UTF-8 request body, keys `model, messages, max_tokens, temperature, tools`.

    `tools` is omitted when the catalogue is empty: OpenAI refuses an empty array. Spec §9.3
    sends no `tool_choice`; a configured one follows `tools` (llama-cpp-python's server
    offers the tools to its model only when the request names one). The body is assembled
    from each message's bytes (`EncodedMessages`, encoded now unless they already are) and
    the tools array (kept in `cache`): the same bytes as encoding the whole document.
    """
    encoded = EncodedMessages.of(messages).encoded
    # The messages' pieces and their commas go in the one join: the body is copied once.
    separated: list[bytes] = []
    for encoding in encoded:
        separated += pieces_of(encoding)
        separated.append(b",")
    parts = [
        b'{"model":',
        compact_utf8(model),
        b',"messages":[',
        *separated[:-1],
        b'],"max_tokens":',
        compact_utf8(max_tokens),
        b',"temperature":',
        compact_utf8(temperature),
    ]
    if tools:
        parts += [b',"tools":', (cache or WireCache()).tools(tools)]
        if tool_choice is not None:
            parts += [b',"tool_choice":', compact_utf8(tool_choice)]
    parts.append(b"}")
    return b"".join(parts)


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
class Completion:
    """One validated model answer; `usage` is None when the server reported none."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = FINISH_STOP
    usage: Usage | None = field(default_factory=lambda: Usage(0, 0))
    model: str = ""
    id: str = ""

    @property
    def truncated(self) -> bool:
        """Whether the answer was cut at `max_tokens` (its text is kept, decision 22)."""
        return self.finish_reason == FINISH_LENGTH


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
    usage: tuple[int, int, int] | None
    """Prompt, completion and reported total tokens; None when the reply has no usage."""


def _usage(top: Mapping[str, Any]) -> tuple[int, int, int] | None:
    if top.get("usage") is None:
        return None
    usage = _object(top["usage"], "usage")
    return (
        _count(usage, "prompt_tokens"),
        _count(usage, "completion_tokens"),
        _count(usage, "total_tokens"),
    )


def _shape(document: Any) -> _Response:
    top = _object(document, "the response")
    identifier = _string(top, "id", "")
    model = _string(top, "model", "")
    raw_choices = _field(top, "choices", "")
    if not isinstance(raw_choices, list):
        raise _Shape("choices must be an array")
    return _Response(
        id=identifier,
        model=model,
        choices=[_choice(choice, f"choices[{index}]") for index, choice in enumerate(raw_choices)],
        usage=_usage(top),
    )


def _cut_call(calls: Sequence[ToolCall]) -> ToolCall | None:
    """The first call whose arguments are not a whole JSON value (a reply cut mid-call)."""
    for call in calls:
        try:
            loads_strict(call.arguments)
        except (ValueError, RecursionError):
            return call
    return None


def _contract(response: _Response) -> Completion:
    if len(response.choices) != 1:
        raise BramaError("response must contain exactly one choice", retry=RetryClass.PERMANENT)
    choice = response.choices[0]
    reason = choice.finish_reason
    if reason == FINISH_TOOL_CALLS and not choice.tool_calls:
        raise BramaError("tool_calls finish reason without calls", retry=RetryClass.PERMANENT)
    if reason == FINISH_LENGTH:
        # A cut answer may succeed next cycle: transient unless there is something to keep.
        cut = _cut_call(choice.tool_calls)
        if cut is not None:
            raise BramaError(
                f"finish reason length cut the arguments of tool call {cut.name}",
                retry=RetryClass.TRANSIENT,
            )
        if not choice.tool_calls and not choice.content:
            raise BramaError("finish reason length with no text", retry=RetryClass.TRANSIENT)
    elif not choice.tool_calls and reason != FINISH_STOP:
        raise BramaError(f"unsupported finish reason: {reason}", retry=RetryClass.PERMANENT)
    usage = None
    if response.usage is not None:
        prompt, completion, reported = response.usage
        if reported not in (0, prompt + completion):
            raise BramaError(
                "usage total does not match prompt plus completion", retry=RetryClass.PERMANENT
            )
        usage = Usage(prompt, completion)  # its total is theirs, whatever was reported
    return Completion(
        content=choice.content,
        tool_calls=choice.tool_calls,
        finish_reason=reason,
        usage=usage,
        model=response.model,
        id=response.id,
    )


def parse_completion(body: bytes | str, scrubber: Scrubber | None = None) -> Completion:
    """Read and validate a completion response body (spec §9.4 with decisions 6 and 22).

    Its text is made safe (`safe_json`), and the runtime's own secrets it echoes are
    withheld (`scrubber`, decision 32) before anything reads it.
    """
    try:
        document = safe_json(loads_strict(body))
        if scrubber is not None:
            document = scrubber.withheld(document)
    except ValueError as error:
        raise JsonFailure(f"invalid completion response: not JSON: {error}") from None
    try:
        response = _shape(document)
    except _Shape as error:
        raise JsonFailure(f"invalid completion response: {error}") from None
    completion = _contract(response)
    if scrubber:
        calls = [
            dataclasses.replace(call, arguments=scrubber.json_text(call.arguments))
            for call in completion.tool_calls
        ]
        completion = dataclasses.replace(completion, tool_calls=calls)
    return completion
