"""The local model engine: decoding policy, prompt rendering, schemas, and the real SmolLM2."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from singularity.gateway import local_model, tool_grammar
from singularity.gateway.local_model import (
    ChatRequest,
    ContextOverflow,
    LocalModel,
    MissingExtra,
    choose_mode,
    render_prompt,
    render_turns,
)
from singularity.gateway.routes import LocalSettings
from singularity.gateway.tool_grammar import ToolSpec, bounded, call_schema, parse_call


def _object(**properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


STRING = {"type": "string"}
REMEMBER = ToolSpec("remember", "Persist a memory", _object(kind=STRING, text=STRING))
RECALL = ToolSpec("recall", "Recall memories containing a query", _object(query=STRING))
SWITCH = ToolSpec(
    "switch_model",
    "Switch the model",
    _object(model={"type": "string", "enum": ["any", "best"]}, reason=STRING),
)
WRITE = ToolSpec(
    "file_write",
    "Write a file",
    _object(path={"type": "string", "maxLength": 40}, lines={"type": "array", "items": STRING}),
)
TOOLS = [REMEMBER, RECALL, SWITCH, WRITE]
SYSTEM = {"role": "system", "content": "You are Ada, an autonomous digital being."}
FRAMING = {
    "role": "user",
    "content": "Begin autonomous cycle 1. Balance: 10 USD. Choose the next useful action.",
}


def _conforms(value: Any, schema: Mapping[str, Any]) -> bool:
    """Enough of JSON Schema for these tools: objects, strings, enums, arrays."""
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema.get("type")
    if kind == "string":
        return isinstance(value, str) and len(value) <= schema.get("maxLength", len(value))
    if kind == "array":
        return isinstance(value, list) and all(_conforms(v, schema["items"]) for v in value)
    if kind == "object":
        properties = schema.get("properties", {})
        return (
            isinstance(value, dict)
            and set(schema.get("required", [])) <= set(value)
            and (schema.get("additionalProperties", True) or set(value) <= set(properties))
            and all(_conforms(v, properties[k]) for k, v in value.items() if k in properties)
        )
    return True


def test_decoding_policy() -> None:
    after_tool = [SYSTEM, FRAMING, {"role": "assistant", "tool_calls": []}, {"role": "tool"}]
    cases = {
        "framing with tools": (ChatRequest([SYSTEM, FRAMING], TOOLS), "call", 4),
        "no tools": (ChatRequest([SYSTEM, FRAMING]), "text", 0),
        "after a tool result": (ChatRequest(after_tool, TOOLS), "text", 0),
        "none": (ChatRequest([FRAMING], TOOLS, "none"), "text", 0),
        "required after a result": (ChatRequest(after_tool, TOOLS, "required"), "call", 4),
        "named": (
            ChatRequest(after_tool, TOOLS, {"type": "function", "function": {"name": "recall"}}),
            "call",
            1,
        ),
    }
    for name, (request, mode, count) in cases.items():
        chosen, tools = choose_mode(request)
        assert (chosen, len(tools)) == (mode, count), name
    assert choose_mode(ChatRequest([FRAMING], TOOLS, {"function": {"name": "nope"}}))[1] == TOOLS


def test_prompt_rendering_shows_calls_and_results() -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "recall", "arguments": '{"query":"sea"}'},
    }
    messages = [
        SYSTEM,
        FRAMING,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok":true}'},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]},
    ]
    turns = render_turns(messages)
    assert turns == [
        ("user", FRAMING["content"]),
        ("assistant", '{"name":"recall","arguments":{"query":"sea"}}'),
        ("user", 'Result of recall: {"ok":true}'),
        ("user", "look\n[image_url omitted]"),
    ]
    prompt = render_prompt("sys", turns[:1])
    assert prompt == (
        "<|im_start|>system\nsys<|im_end|>\n"
        f"<|im_start|>user\n{FRAMING['content']}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    listed = local_model.system_text(ChatRequest([SYSTEM, FRAMING], TOOLS))
    assert listed.startswith("You can use these tools:\n- remember(kind, text): Persist a memory\n")
    assert listed.endswith("\n\n" + SYSTEM["content"])
    assert local_model.system_text(ChatRequest([SYSTEM, FRAMING])) == SYSTEM["content"]


def test_bounded_schemas_admit_only_what_the_original_admits() -> None:
    schema = bounded(WRITE.parameters, 50)
    assert schema["properties"]["path"] == {"type": "string", "maxLength": 40, "minLength": 1}
    assert schema["properties"]["lines"]["maxItems"] == tool_grammar.ARRAY_CAP
    assert schema["properties"]["lines"]["items"]["maxLength"] == 50
    assert (
        bounded(SWITCH.parameters)["properties"]["model"]
        == SWITCH.parameters["properties"]["model"]
    )
    assert WRITE.parameters["properties"]["path"] == {"type": "string", "maxLength": 40}
    # Free-form objects become {}, and a value of any shape becomes a short string.
    loose = bounded({"type": "object", "properties": {"x": {}, "o": {"type": "object"}}}, 9)
    assert loose["properties"]["x"] == {"type": "string", "maxLength": 9, "minLength": 1}
    assert loose["properties"]["o"] == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    assert loose["additionalProperties"] is False
    single = call_schema([RECALL])
    assert single["properties"]["name"] == {"const": "recall"}
    assert [option["properties"]["name"]["const"] for option in call_schema(TOOLS)["anyOf"]] == [
        "remember",
        "recall",
        "switch_model",
        "file_write",
    ]


def test_string_caps_shrink_so_that_the_longest_call_fits_the_budget() -> None:
    for budget in (64, 96, 256, 1024):
        for tool in TOOLS:
            arguments = call_schema([tool], budget)["properties"]["arguments"]
            strings, other = tool_grammar.worst_case(arguments)
            caps = [
                p.get("maxLength", p.get("items", {}).get("maxLength"))
                for p in arguments["properties"].values()
            ]
            cap = max(c for c in caps if c is not None)
            assert cap <= tool_grammar.STRING_CAP
            if cap > tool_grammar.MIN_STRING:
                assert strings * cap + other + len(tool.name) + 30 <= budget, (budget, tool.name)


def test_parse_call() -> None:
    call = parse_call('{"name": "recall", "arguments": {"query": "sea"}}', TOOLS)
    assert call is not None
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "recall", "arguments": '{"query":"sea"}'}
    assert parse_call('{"name": "recall", "arguments": {"que', TOOLS) is None
    assert parse_call('{"name": "other", "arguments": {}}', TOOLS) is None


def test_a_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_model.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingExtra, match=r"pip install 'singularity\[local\]'"):
        local_model.model_path(LocalSettings())
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(MissingExtra, match=r"llama-cpp-python is missing.*make setup"):
        LocalModel(LocalSettings())


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    yield LocalModel(LocalSettings(max_tokens=96, max_text_chars=200))


def test_the_real_model_calls_offered_tools_with_valid_arguments(model: LocalModel) -> None:
    schemas = {tool.name: tool.parameters for tool in TOOLS}
    for tools, choice in (
        (TOOLS, None),
        ([WRITE], "required"),
        (TOOLS, {"function": {"name": "switch_model"}}),
    ):
        request = ChatRequest([SYSTEM, FRAMING], tools, choice, 2048, 0.2)
        result = model.complete(request)
        assert (result.finish_reason, result.content) == ("tool_calls", None)
        [call] = result.tool_calls
        name = call["function"]["name"]
        arguments = json.loads(call["function"]["arguments"])
        assert name in {tool.name for tool in tools}
        assert _conforms(arguments, schemas[name]), (name, arguments)
        assert result.prompt_tokens == len(model.prompt(request, 96))
        assert 0 < result.completion_tokens <= 96


def test_the_real_model_answers_in_text_after_a_tool_result(model: LocalModel) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "recall", "arguments": '{"query":"sea"}'},
    }
    messages = [
        SYSTEM,
        FRAMING,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"memories":["the sea is blue"]}'},
    ]
    result = model.complete(ChatRequest(messages, TOOLS, None, 2048, 0.2))
    assert result.finish_reason == "stop"
    assert result.tool_calls == []
    assert result.content and len(result.content) <= 200
    assert result.prompt_tokens == len(model.prompt(ChatRequest(messages, TOOLS), 96))


def test_context_overflow_drops_old_turns_then_refuses() -> None:
    small = LocalModel(LocalSettings(n_ctx=256, max_tokens=16, max_text_chars=40))
    history = [{"role": "user", "content": f"Fact {i}: the sea is blue."} for i in range(200)]
    trimmed = small.complete(ChatRequest([SYSTEM, *history], (), None, 16, 0.0))
    assert trimmed.finish_reason in ("stop", "length")
    assert 128 < trimmed.prompt_tokens <= 256 - 16
    with pytest.raises(ContextOverflow, match="context window holds 256"):
        small.complete(ChatRequest([SYSTEM, {"role": "user", "content": "sea " * 2000}]))


def test_a_request_past_its_deadline_ends_as_length() -> None:
    hurried = LocalModel(LocalSettings(max_tokens=64, request_timeout_secs=1e-6))
    result = hurried.complete(ChatRequest([SYSTEM, FRAMING], TOOLS))
    assert result.finish_reason == "length"
    assert result.tool_calls == []
    assert result.completion_tokens <= 2
