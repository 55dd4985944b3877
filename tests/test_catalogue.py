"""The tool catalogue (spec §10.1), dispatch of one call (§10.2) and the tool message (§10.3).

Contract: registration refuses a bad name, a non-object schema and a duplicate with
exact `tool: …` errors (exit 5); dispatch first parses the arguments (invalid JSON, or
valid JSON that is not an object, fail `invalid_arguments`), then looks the name up
(`unknown_tool`), then routes; the tool message is role `tool` with the call id and the
tool name, and content is compact JSON with all five keys sorted at every depth, or the
fixed rejection object when the output boundary refuses the content.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from singularity.domain.records import MemoryEntry
from singularity.domain.state import AgentState
from singularity.errors import CatalogueError
from singularity.tools.base import JsonObject, Outcome, Status, ToolDefinition
from singularity.tools.catalogue import Catalogue, tool_message
from singularity.tools.output_boundary import STRICT
from singularity.tools.self_tools import memory_and_self_tools
from tests.support.beings import new_state

SCHEMA: JsonObject = {"type": "object", "properties": {}}
REJECTED = '{"error_code":"sensitive_output_rejected","status":"failed"}'


class FakeToolset:
    """A toolset that records its calls and answers with a fixed outcome."""

    def __init__(self, *names: str, parameters: Any = None, outcome: Outcome | None = None):
        self._definitions = [
            ToolDefinition(name, f"{name} tool", SCHEMA if parameters is None else parameters)
            for name in names
        ]
        self.outcome = outcome or Outcome.success({"ok": True})
        self.calls: list[tuple[str, JsonObject]] = []

    def definitions(self) -> Sequence[ToolDefinition]:
        return self._definitions

    async def call(self, name: str, arguments: JsonObject) -> Outcome:
        self.calls.append((name, arguments))
        return self.outcome


def _state() -> AgentState:
    return new_state()


def dispatch(catalogue: Catalogue, name: str, arguments: str) -> Outcome:
    return asyncio.run(catalogue.dispatch(name, arguments))


def failed(code: str, message: str) -> Outcome:
    return Outcome(Status.FAILED, {"message": message}, code)


# --- registration ---------------------------------------------------------------------


def test_catalogue_keeps_toolset_order() -> None:
    first, second = FakeToolset("b_tool", "a-tool"), FakeToolset("C9")
    catalogue = Catalogue([first, second], boundary=STRICT)
    assert [definition.name for definition in catalogue.definitions] == ["b_tool", "a-tool", "C9"]
    assert catalogue.wire()[0] == {
        "type": "function",
        "function": {"name": "b_tool", "description": "b_tool tool", "parameters": SCHEMA},
    }
    assert "C9" in catalogue
    assert "c9" not in catalogue


@pytest.mark.parametrize(
    "name", ["", " ", "has space", "dot.name", "slash/name", "naïve", "tab\tname", "nl\n", "é"]
)
def test_invalid_tool_name(name: str) -> None:
    with pytest.raises(CatalogueError) as caught:
        Catalogue([FakeToolset(name)], boundary=STRICT)
    assert str(caught.value) == f"tool: invalid tool name: {name}"
    assert caught.value.exit_code == 5


@pytest.mark.parametrize("parameters", [[], [{"type": "object"}], "object", 1, True])
def test_schema_must_be_an_object(parameters: Any) -> None:
    with pytest.raises(CatalogueError) as caught:
        Catalogue([FakeToolset("las_tool", parameters=parameters)], boundary=STRICT)
    assert str(caught.value) == "tool: tool schema is not an object: las_tool"
    assert caught.value.exit_code == 5


def test_duplicate_within_and_across_toolsets() -> None:
    with pytest.raises(CatalogueError) as caught:
        Catalogue([FakeToolset("dup", "dup")], boundary=STRICT)
    assert str(caught.value) == "tool: duplicate tool: dup"
    with pytest.raises(CatalogueError) as caught:
        Catalogue(
            [FakeToolset("singularity_memory_remember"), memory_and_self_tools(_state())],
            boundary=STRICT,
        )
    assert str(caught.value) == "tool: duplicate tool: singularity_memory_remember"
    assert caught.value.exit_code == 5


# --- dispatch -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "parser_message"),
    [
        ("", "Expecting value: line 1 column 1 (char 0)"),
        ("{", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        ("{} {}", "Extra data: line 1 column 4 (char 3)"),
        ("{'a': 1}", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ],
)
def test_invalid_json_arguments(arguments: str, parser_message: str) -> None:
    tools = FakeToolset("known")
    catalogue = Catalogue([tools], boundary=STRICT)
    for name in ("known", "unknown"):
        outcome = dispatch(catalogue, name, arguments)
        assert outcome == failed("invalid_arguments", f"invalid JSON arguments: {parser_message}")
    assert tools.calls == []


@pytest.mark.parametrize("arguments", ["NaN", '{"a": NaN}', '{"a": Infinity}', '{"a":-Infinity}'])
def test_non_json_constants_are_invalid_json(arguments: str) -> None:
    tools = FakeToolset("known")
    outcome = dispatch(Catalogue([tools], boundary=STRICT), "known", arguments)
    assert outcome.status is Status.FAILED
    assert outcome.error_code == "invalid_arguments"
    assert outcome.content["message"].startswith("invalid JSON arguments: ")
    assert tools.calls == []


@pytest.mark.parametrize("arguments", ["[]", "1", '"x"', "null", "true", "[{}]", " 2.5 "])
def test_arguments_must_be_an_object_before_the_name_is_looked_up(arguments: str) -> None:
    tools = FakeToolset("known")
    catalogue = Catalogue([tools], boundary=STRICT)
    expected = failed("invalid_arguments", "tool arguments must be a JSON object")
    assert dispatch(catalogue, "known", arguments) == expected
    assert dispatch(catalogue, "not_in_catalogue", arguments) == expected
    assert tools.calls == []


def test_unknown_tool_never_reaches_a_toolset() -> None:
    tools = FakeToolset("known")
    catalogue = Catalogue([tools], boundary=STRICT)
    for name in ("unknown", "KNOWN", "known ", ""):
        assert dispatch(catalogue, name, "{}") == failed(
            "unknown_tool", "tool is not in the current catalog"
        )
    assert tools.calls == []


def test_dispatch_routes_to_the_owning_toolset() -> None:
    first = FakeToolset("one", outcome=Outcome.success("first"))
    second = FakeToolset("two", outcome=Outcome.success("second"))
    catalogue = Catalogue([first, second], boundary=STRICT)
    assert dispatch(catalogue, "two", ' {"x": [1, {"y": null}]} ') == Outcome.success("second")
    assert second.calls == [("two", {"x": [1, {"y": None}]})]
    assert first.calls == []


# --- the tool message -----------------------------------------------------------------


def test_success_message_is_compact_sorted_and_keeps_non_ascii() -> None:
    outcome = Outcome.success({"z": 1, "a": {"y": "Zoë → 東京", "b": [{"d": 1, "c": 2.5}]}})
    built = tool_message("call_1", "some_tool", outcome, STRICT)
    assert built.rejection is None
    assert built.message == {
        "role": "tool",
        "content": '{"chat_id":null,"content":{"a":{"b":[{"c":2.5,"d":1}],"y":"Zoë → 東京"},"z":1},'
        '"error_code":null,"message_id":null,"status":"success"}',
        "tool_call_id": "call_1",
        "name": "some_tool",
    }
    assert list(built.message) == ["role", "content", "tool_call_id", "name"]


def test_failed_and_indeterminate_messages() -> None:
    outcome = Outcome.failed("unknown_tool", "tool is not in the current catalog")
    built = tool_message("c", "x", outcome, STRICT)
    assert built.message["content"] == (
        '{"chat_id":null,"content":{"message":"tool is not in the current catalog"},'
        '"error_code":"unknown_tool","message_id":null,"status":"failed"}'
    )
    chat = "0f0e0d0c-0b0a-4908-8706-050403020100"
    message = "11111111-2222-4333-8444-555555555555"
    outcome = Outcome(Status.INDETERMINATE, {"message": "most: gone"}, "remote", chat, message)
    assert tool_message("c", "most_send_message", outcome, STRICT).message["content"] == (
        f'{{"chat_id":"{chat}","content":{{"message":"most: gone"}},"error_code":"remote",'
        f'"message_id":"{message}","status":"indeterminate"}}'
    )


@pytest.mark.parametrize("content", [None, "text", 0, [], {}])
def test_all_five_keys_are_always_present(content: Any) -> None:
    text = tool_message("c", "x", Outcome.success(content), STRICT).message["content"]
    assert text.startswith('{"chat_id":null,"content":')
    assert text.endswith(',"error_code":null,"message_id":null,"status":"success"}')


@pytest.mark.parametrize(
    "content",
    [
        {"text": "see /etc/passwd"},
        {"api_token": "x"},
        {"nested": {"Next-Page Token": 1}},
        "a\x00b",
        "[not json",
        "-----BEGIN PRIVATE KEY-----",
    ],
)
def test_rejected_content_is_replaced_whole(content: Any) -> None:
    built = tool_message("call_9", "t", Outcome.success(content), STRICT)
    assert built.message == {
        "role": "tool",
        "content": REJECTED,
        "tool_call_id": "call_9",
        "name": "t",
    }
    assert built.rejection  # the reason is logged, not shown to the model


def test_self_tools_through_dispatch_and_message() -> None:
    state = _state()
    clock_time = datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)
    catalogue = Catalogue([memory_and_self_tools(state, lambda: clock_time)], boundary=STRICT)
    remembered = dispatch(
        catalogue, "singularity_memory_remember", '{"kind":"fact","text":"Zoë likes tea"}'
    )
    memory_id = remembered.content["memory_id"]
    assert tool_message("c1", "singularity_memory_remember", remembered, STRICT).message[
        "content"
    ] == (
        f'{{"chat_id":null,"content":{{"memory_id":"{memory_id}"}},"error_code":null,'
        '"message_id":null,"status":"success"}'
    )
    recalled = dispatch(catalogue, "singularity_memory_recall", '{"query":"ZOË"}')
    assert recalled.content == {"memories": []}  # non-ASCII case is not folded
    recalled = dispatch(catalogue, "singularity_memory_recall", '{"query":"zoë LIKES"}')
    assert tool_message("c2", "singularity_memory_recall", recalled, STRICT).message["content"] == (
        '{"chat_id":null,"content":{"memories":[{"created_at":"2026-05-06T07:08:09Z",'
        f'"id":"{memory_id}","kind":"fact","sources":[],"text":"Zoë likes tea"}}]}},'
        '"error_code":null,"message_id":null,"status":"success"}'
    )
    invalid = dispatch(catalogue, "singularity_memory_remember", '{"kind":"fact"}')
    assert tool_message("c3", "singularity_memory_remember", invalid, STRICT).message[
        "content"
    ] == (
        '{"chat_id":null,"content":{"message":"text is invalid"},'
        '"error_code":"invalid_arguments","message_id":null,"status":"failed"}'
    )


def test_recalled_memory_with_a_path_is_rejected() -> None:
    state = _state()
    state.mind.memories.append(
        MemoryEntry(
            id="00000000-0000-4000-8000-000000000001",
            kind="note",
            text="the users live in /etc/passwd",
            created_at="2026-01-01T00:00:00Z",
            sources=[],
        )
    )
    catalogue = Catalogue([memory_and_self_tools(state)], boundary=STRICT)
    outcome = dispatch(catalogue, "singularity_memory_recall", '{"query":"users"}')
    assert outcome.status is Status.SUCCESS  # the outcome itself succeeded
    built = tool_message("c", "singularity_memory_recall", outcome, STRICT)
    assert built.message["content"] == REJECTED
    assert built.rejection is not None
