"""The local model engine: decoding policy, prompt rendering, schemas, and the real SmolLM2.

The real-model cases run the smallest model (SmolLM2-135M, seconds per answer); the
default model is exercised through `brama serve` in `test_brama_default_model.py`.
"""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from singularity.gateway_server import chat_prompt, local_model, prompt_store, tool_grammar
from singularity.gateway_server.chat_prompt import Turn, render_prompt, render_turns
from singularity.gateway_server.local_model import (
    ChatRequest,
    ContextOverflow,
    LocalModel,
    MissingExtra,
    UnusableSchema,
    choose_mode,
)
from singularity.gateway_server.model_catalogue import SMALLEST_MODEL
from singularity.gateway_server.model_files import MissingModel
from singularity.gateway_server.routes import LocalSettings
from singularity.gateway_server.tool_grammar import ToolSpec, bounded, call_schema, parse_call


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


def _small(**settings: Any) -> LocalSettings:
    """The smallest model; no prompt kept on disk unless a test asks for it."""
    return LocalSettings(model=SMALLEST_MODEL, **{"prompt_cache_dir": "", **settings})


def test_decoding_policy() -> None:
    after_tool = [SYSTEM, FRAMING, {"role": "assistant", "tool_calls": []}, {"role": "tool"}]
    json_answer = ChatRequest([SYSTEM, FRAMING], (), None, response_format={"type": "object"})
    for mode in ("hybrid", "free"):
        assert choose_mode(ChatRequest([SYSTEM, FRAMING], TOOLS), mode) == ("free", TOOLS)
        assert choose_mode(ChatRequest(after_tool, TOOLS), mode) == ("free", TOOLS)
        assert choose_mode(ChatRequest(after_tool, TOOLS, "required"), mode) == ("call", TOOLS)
        assert choose_mode(json_answer, mode) == ("json", [])
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
        chosen, tools = choose_mode(request, "grammar")
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
        Turn("user", FRAMING["content"]),
        Turn(
            "assistant", '<tool_call>\n{"name":"recall","arguments":{"query":"sea"}}\n</tool_call>'
        ),
        Turn("user", '<tool_response>\n{"ok":true}\n</tool_response>', result=True),
        Turn("user", "look\n[image_url omitted]"),
    ]
    prompt = render_prompt("sys", turns[:1])
    assert prompt == (
        "<|im_start|>system\nsys<|im_end|>\n"
        f"<|im_start|>user\n{FRAMING['content']}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    listed = chat_prompt.system_text([SYSTEM, FRAMING], TOOLS)
    assert listed == (
        f"# Tools\n\n{chat_prompt.TOOLS_INTRO}\n"
        "- remember(kind: string, text: string): Persist a memory\n"
        "- recall(query: string): Recall memories containing a query\n"
        '- switch_model(model: "any"|"best", reason: string): Switch the model\n'
        "- file_write(path: string, lines: array of string): Write a file\n\n"
        f"{SYSTEM['content']}\n\n{chat_prompt.CALL_HOWTO}"
    )
    assert chat_prompt.CALL_HOWTO.startswith("# Calling a tool\n\nTo call a tool, reply with")
    assert chat_prompt.system_text([SYSTEM, FRAMING], []) == SYSTEM["content"]
    optional = ToolSpec("list", "List", {"properties": {"folder": STRING}})
    assert chat_prompt.signature(optional) == "- list(folder?: string): List"


def test_the_results_of_one_round_share_a_user_turn() -> None:
    turns = render_turns([FRAMING, *_exchange(0), *_exchange(1)])
    assert [(turn.role, turn.result) for turn in turns] == [
        ("user", False),
        ("assistant", False),
        ("user", True),
        ("assistant", False),
        ("user", True),
    ]
    assert turns[2].text == (
        '<tool_response>\n{"memories":["fact 0"]}\n</tool_response>\n'
        '<tool_response>\n{"memories":["fact 0"]}\n</tool_response>'
    )


def test_empty_answers_are_left_out_of_the_prompt() -> None:
    said = {"role": "assistant", "content": "I looked."}
    messages = [
        FRAMING,
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "assistant", "content": " \n"},
        FRAMING,
        said,
    ]
    assert render_turns(messages) == [
        Turn("user", FRAMING["content"]),
        Turn("user", FRAMING["content"]),
        Turn("assistant", "I looked."),
    ]


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
    from singularity.gateway_server import model_files

    monkeypatch.setattr(model_files.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingModel, match=r"pip install 'singularity\[local\]'"):
        local_model.model_path(_small())
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(MissingExtra, match=r"llama-cpp-python is missing.*make setup"):
        LocalModel(_small())


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    yield LocalModel(_small(max_tokens=96, max_text_chars=200, tool_calls="grammar"))


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


def test_json_answers_follow_the_requested_schema(model: LocalModel) -> None:
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string", "enum": ["blue", "green"]}},
        "required": ["colour"],
        "additionalProperties": False,
    }
    ask = {"role": "user", "content": "What colour is the sea? Answer in JSON."}
    for wanted, check in (({"type": "object"}, dict), (schema, dict)):
        result = model.complete(ChatRequest([ask], (), None, 64, 0.0, response_format=wanted))
        assert result.finish_reason == "stop", result
        assert isinstance(json.loads(result.content or ""), check)
    answer = json.loads(model.complete(ChatRequest([ask], (), None, 64, 0.0, schema)).content or "")
    assert answer["colour"] in ("blue", "green")
    with pytest.raises(UnusableSchema, match="cannot be used"):
        model.complete(ChatRequest([ask], (), None, 64, 0.0, {"type": "object", "$ref": "#/x"}))


def test_plain_answers_stream_their_text_as_it_is_decoded() -> None:
    plain = LocalModel(_small(max_tokens=24, max_text_chars=200))
    pieces: list[str] = []
    result = plain.complete(ChatRequest([SYSTEM, FRAMING], (), None, 24, 0.0), pieces.append)
    assert len(pieces) > 1
    assert "".join(pieces).strip() == result.content
    assert 0 < result.completion_tokens <= 24


def test_context_overflow_drops_old_turns_then_refuses() -> None:
    small = LocalModel(_small(n_ctx=256, max_tokens=16, max_text_chars=40))
    history = [{"role": "user", "content": f"Fact {i}: the sea is blue."} for i in range(200)]
    trimmed = small.complete(ChatRequest([SYSTEM, *history], (), None, 16, 0.0))
    assert trimmed.finish_reason in ("stop", "length")
    assert 128 < trimmed.prompt_tokens <= 256 - 16
    with pytest.raises(ContextOverflow, match="context window holds 256"):
        small.complete(ChatRequest([SYSTEM, {"role": "user", "content": "sea " * 2000}]))


def _exchange(index: int) -> list[dict[str, Any]]:
    """An assistant turn with two calls, and their two results."""
    calls = [
        {
            "id": f"c{index}-{n}",
            "type": "function",
            "function": {"name": "recall", "arguments": json.dumps({"query": f"sea {index}"})},
        }
        for n in range(2)
    ]
    results = [
        {"role": "tool", "tool_call_id": call["id"], "content": f'{{"memories":["fact {index}"]}}'}
        for call in calls
    ]
    return [{"role": "assistant", "content": "", "tool_calls": calls}, *results]


def test_trimming_drops_a_call_together_with_its_results() -> None:
    small = LocalModel(_small(n_ctx=512, max_tokens=16, max_text_chars=40))
    for count in range(8, 16):  # cuts landing on either turn of an exchange
        history = [FRAMING, *(m for i in range(count) for m in _exchange(i))]
        request = ChatRequest([SYSTEM, *history], TOOLS)
        text = small._llama.detokenize(small.prompt(request, 16), special=True).decode()
        turns = text.split(chat_prompt.START)[2:]
        assert len(turns) < 1 + 2 * count, "nothing was dropped"
        assert turns[0].startswith("assistant\n<tool_call>"), turns[0]
    # The last call cannot be kept without its results: that is an overflow, not an orphan.
    tight = LocalModel(_small(n_ctx=320, max_tokens=16, max_text_chars=40))
    longest = [FRAMING, *_exchange(0)]
    longest[-1] = {**longest[-1], "content": "sea " * 80}
    with pytest.raises(ContextOverflow, match="context window holds 320"):
        tight.prompt(ChatRequest([SYSTEM, *longest], TOOLS), 16)


class _Silent(LocalModel):
    """A model whose free answer is empty, as small models' sometimes are."""

    def generate(
        self,
        tokens: list[int],
        limit: int,
        temperature: float,
        grammar: Any,
        *args: Any,
        **kwargs: Any,
    ) -> local_model.Generated:
        if grammar is None:
            return local_model.Generated("  ", "stop", 1)
        return super().generate(tokens, limit, temperature, grammar, *args, **kwargs)


def test_an_empty_free_answer_becomes_a_plain_one() -> None:
    silent = _Silent(_small(max_tokens=24, max_text_chars=60, tool_calls="hybrid"))
    result = silent.complete(ChatRequest([SYSTEM, FRAMING], TOOLS, None, 24, 0.2))
    assert result.tool_calls == []
    assert result.content and result.content.strip() == result.content
    assert result.content[0] not in "{["
    assert 1 < result.completion_tokens <= 1 + 24
    free = _Silent(_small(max_tokens=24, max_text_chars=60, tool_calls="free"))
    assert free.complete(ChatRequest([SYSTEM, FRAMING], TOOLS, None, 24, 0.2)).content == ""


def test_a_request_past_its_deadline_ends_as_length() -> None:
    hurried = LocalModel(_small(max_tokens=64, request_timeout_secs=1e-6, tool_calls="grammar"))
    result = hurried.complete(ChatRequest([SYSTEM, FRAMING], TOOLS))
    assert result.finish_reason == "length"
    assert result.tool_calls == []
    assert result.completion_tokens <= 2


def test_the_next_round_reuses_the_evaluated_prefix(model: LocalModel) -> None:
    first = ChatRequest([SYSTEM, FRAMING], TOOLS, None, 96, 0.2)
    model.complete(first)
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "recall", "arguments": '{"query":"sea"}'},
    }
    second = ChatRequest(
        [
            SYSTEM,
            FRAMING,
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": '{"memories":[]}'},
        ],
        TOOLS,
    )
    evaluated = model._llama._input_ids.tolist()
    shared = type(model._llama).longest_token_prefix(evaluated, model.prompt(second, 96))
    # Everything before the last turn (tools, system prompt, framing) is evaluated already.
    assert shared >= len(model.prompt(first, 96)) - 1


def _counting(model: LocalModel) -> list[int]:
    """The number of tokens of each evaluation `model` runs from now on."""
    counts: list[int] = []
    evaluate = model._llama.eval

    def counted(tokens: Any) -> None:
        counts.append(len(tokens))
        evaluate(tokens)

    model._llama.eval = counted
    return counts


def test_a_restarted_model_loads_the_evaluated_prompt_from_disk(tmp_path: Path) -> None:
    settings = _small(max_tokens=16, max_text_chars=60, prompt_cache_dir=str(tmp_path))
    long_system = {"role": "system", "content": "You are Ada. " + "Keep notes well. " * 60}
    request = ChatRequest([long_system, FRAMING], (), None, 16, 0.0)
    first = LocalModel(settings)
    evaluated = _counting(first)
    answer = first.complete(request)
    assert sum(evaluated) >= answer.prompt_tokens  # the whole prompt, from an empty context
    [store] = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert stat.S_IMODE(store.stat().st_mode) == 0o700
    assert sorted(p.suffix for p in store.iterdir()) == [".json", ".session"]
    again = LocalModel(settings)
    reloaded = _counting(again)
    assert again.complete(request).content == answer.content
    assert sum(reloaded) < 20  # the last prompt token (for its logits), then the answer


def test_a_damaged_saved_prompt_is_removed_and_the_prompt_evaluated(tmp_path: Path) -> None:
    settings = _small(max_tokens=8, max_text_chars=40, prompt_cache_dir=str(tmp_path))
    long_system = {"role": "system", "content": "You are Ada. " + "Keep notes well. " * 60}
    request = ChatRequest([long_system, FRAMING], (), None, 8, 0.0)
    answer = LocalModel(settings).complete(request)
    [session] = tmp_path.glob("*/*.session")
    with session.open("r+b") as damaged:
        damaged.seek(session.stat().st_size // 2)
        damaged.write(b"\xff" * 64)
    again = LocalModel(settings)
    evaluated = _counting(again)
    assert again.complete(request).content == answer.content
    assert sum(evaluated) >= answer.prompt_tokens
    # The damaged context is gone; the prompt just evaluated is saved in its place.
    [record] = tmp_path.glob("*/*.json")
    assert record.with_suffix(".session").stat().st_size == session.stat().st_size


def test_only_the_newest_saved_prompts_are_kept(tmp_path: Path) -> None:
    settings = _small(max_tokens=4, max_text_chars=20, prompt_cache_dir=str(tmp_path))
    model = LocalModel(settings)
    for n in range(prompt_store.KEEP + 2):
        system = {"role": "system", "content": f"You are Ada {n}. " + "Keep notes. " * 50}
        model.complete(ChatRequest([system, FRAMING], (), None, 4, 0.0))
    assert len(list(tmp_path.glob("*/*.json"))) == prompt_store.KEEP
    assert len(list(tmp_path.glob("*/*.session"))) == prompt_store.KEEP
