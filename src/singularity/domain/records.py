"""The records a being keeps besides its mind: memories, children, actions, messages."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    with_config,
)
from typing_extensions import TypedDict

from singularity.money import parse_money, render_money
from singularity.timestamps import is_timestamp


def _timestamp(value: str) -> str:
    if not is_timestamp(value):
        raise ValueError(f"not an RFC 3339 timestamp: {value!r}")
    return value


class JsonNumber(float):
    """A JSON number with a fraction or exponent that remembers its text.

    Used as `parse_float` when reading `state.json`, so money written as a JSON number
    is read exactly (`0.0000027777777777777777777778` has more digits than a float).
    """

    text: str

    def __new__(cls, text: str) -> JsonNumber:
        number = super().__new__(cls, text)
        number.text = text
        return number


def _money(value: object) -> Decimal:
    return parse_money(value.text if isinstance(value, JsonNumber) else value)


Timestamp = Annotated[str, AfterValidator(_timestamp)]
Money = Annotated[
    Decimal,
    BeforeValidator(_money),
    PlainSerializer(render_money, return_type=str, when_used="always"),
]
ActionStatus = Literal["success", "failed", "indeterminate"]


class Source(BaseModel):
    """Provenance of an imported memory: which source and item it came from."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: str
    source_id: str
    item_id: str


class MemoryEntry(BaseModel):
    """One persistent memory."""

    model_config = ConfigDict(strict=True)

    id: str
    kind: str
    text: str
    created_at: Timestamp
    sources: list[Source] = []


class ChildRecord(BaseModel):
    """A child being this being created (spec §14)."""

    model_config = ConfigDict(strict=True)

    id: str
    name: str
    ticker: str
    state_dir: str
    created_at: Timestamp
    status: str


class ActionRecord(BaseModel):
    """One tool call, as the framing message recalls it."""

    model_config = ConfigDict(strict=True)

    cycle: int
    tool: str
    status: ActionStatus
    at: Timestamp


# Nested records ignore unknown fields (spec §5.4); without an own config these
# TypedDicts would inherit `extra="forbid"` from the top-level AgentState.
_NESTED = ConfigDict(extra="ignore", strict=True)


@with_config(_NESTED)
class FunctionCall(TypedDict):
    """The function part of a tool call: its name and the raw JSON arguments text."""

    name: str
    arguments: str


@with_config(_NESTED)
class ToolCall(TypedDict):
    """A tool call the model made."""

    id: str
    type: str
    function: FunctionCall


@with_config(_NESTED)
class ChatMessage(TypedDict):
    """One message of the conversation, in the OpenAI shape; absent optionals omitted."""

    role: Literal["system", "user", "assistant", "tool"]
    content: NotRequired[Any]
    tool_call_id: NotRequired[str]
    name: NotRequired[str]
    tool_calls: NotRequired[list[ToolCall]]


class CreatedResources(BaseModel):
    """Most chats and messages this being created, deduplicated, in insertion order."""

    chat_ids: list[str] = []
    message_ids: list[str] = []
