"""Tools from typed functions: the schema and the argument checks `@tool` derives."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

import pytest

import singularity
from singularity.jsoncodec import compact
from singularity.tools.arguments import RANGE, Integer, Text
from singularity.tools.base import Outcome, Status, ToolArgumentError
from singularity.tools.typed import Key, TypedTool, tool, toolset

Note = Annotated[str, Text(8)]


@tool("demo_note", "Keep a note")
async def note(
    box: list[str],
    *,
    text: Note,
    origin: Annotated[str, Text(16), Key("from")],
    tag: Note | None = None,
    count: Annotated[int, Integer(1, 3, message=RANGE)] = 1,
    mode: Literal["a", "b"] = "a",
    urgent: bool = False,
    weight: float | None = None,
) -> Outcome:
    box.append(text)
    return Outcome.success(
        {
            "text": text,
            "from": origin,
            "tag": tag,
            "count": count,
            "mode": mode,
            "urgent": urgent,
            "weight": weight,
        }
    )


def test_the_schema_is_closed_in_parameter_order() -> None:
    assert compact(note.definition.wire()) == (
        '{"type":"function","function":{"name":"demo_note","description":"Keep a note",'
        '"parameters":{"type":"object","properties":{"text":{"type":"string"},'
        '"from":{"type":"string"},"tag":{"type":"string"},'
        '"count":{"type":"integer","minimum":1,"maximum":3},'
        '"mode":{"type":"string","enum":["a","b"]},"urgent":{"type":"boolean"},'
        '"weight":{"type":"number"}},"required":["text","from"],'
        '"additionalProperties":false}}}'
    )


def test_a_tool_without_arguments_has_an_empty_closed_schema() -> None:
    @tool("demo_ping", "Ping", private=True)
    def ping(context: None) -> Outcome:
        return Outcome.success({})

    assert ping.definition.parameters == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    assert ping.definition.private


def test_values_are_checked_converted_and_defaulted() -> None:
    box: list[str] = []
    outcome = asyncio.run(note(box, {"text": "  hi ", "from": "me", "tag": None, "extra": 1}))
    assert outcome.content == {
        "text": "hi",
        "from": "me",
        "tag": None,
        "count": 1,
        "mode": "a",
        "urgent": False,
        "weight": None,
    }
    assert box == ["hi"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "text is invalid"),
        ({"text": "x", "from": "   "}, "from is invalid"),
        ({"text": "123456789", "from": "me"}, "text is invalid"),
        ({"text": "x", "from": "me", "count": None}, "count must be an integer from 1 to 3"),
        ({"text": "x", "from": "me", "count": True}, "count must be an integer from 1 to 3"),
        ({"text": "x", "from": "me", "mode": "c"}, "mode is invalid"),
        ({"text": "x", "from": "me", "urgent": 1}, "urgent is invalid"),
        ({"text": "x", "from": "me", "weight": False}, "weight is invalid"),
        ({"text": 1, "from": 2, "count": 9}, "text is invalid"),
    ],
)
def test_the_first_broken_argument_in_order_is_the_error(
    arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(ToolArgumentError) as caught:
        note.parse(arguments)
    assert (caught.value.error_code, caught.value.message) == ("invalid_arguments", message)


def test_a_toolset_returns_an_argument_error_as_a_failed_outcome() -> None:
    box: list[str] = []
    tools = toolset(box, [note])
    outcome = asyncio.run(tools.call("demo_note", {"text": "x"}))
    assert (outcome.status, outcome.error_code, outcome.content) == (
        Status.FAILED,
        "invalid_arguments",
        {"message": "from is invalid"},
    )
    assert box == []


def test_a_parameter_without_a_kind_is_refused_when_the_tool_is_made() -> None:
    def bad(context: None, *, data: dict[str, str]) -> Outcome:
        return Outcome.success(data)

    with pytest.raises(TypeError) as caught:
        tool("demo_bad", "Bad")(bad)
    assert str(caught.value) == (
        f"argument data of tool function {bad.__qualname__} needs a kind: "
        "Annotated[..., <kind>], str, int, float, bool or Literal[...]"
    )


def test_the_decorator_is_public() -> None:
    assert singularity.tool is tool
    assert isinstance(note, TypedTool)
