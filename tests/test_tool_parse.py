"""Tool calls read from a local model's free text, and what of it may be streamed early."""

from __future__ import annotations

import json

import pytest

from singularity.gateway_server.streaming import TextGate
from singularity.gateway_server.tool_grammar import ToolSpec
from singularity.gateway_server.tool_parse import find_calls, may_open_call

REMEMBER = ToolSpec(
    "remember",
    "Persist a memory",
    {
        "type": "object",
        "properties": {"kind": {"type": "string"}, "text": {"type": "string"}},
        "required": ["kind", "text"],
        "additionalProperties": False,
    },
)
READ = ToolSpec(
    "read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}
)
TOOLS = [REMEMBER, READ]
CALL = '{"name": "remember", "arguments": {"kind": "fact", "text": "the sea is blue"}}'
ARGUMENTS = {"kind": "fact", "text": "the sea is blue"}

FORMS = {
    "tagged": (f"<tool_call>\n{CALL}\n</tool_call>", ""),
    "tagged, never closed": (f"<tool_call>\n{CALL}", ""),
    "fenced": (f"```json\n{CALL}\n```", ""),
    "fenced after prose": (
        f"I will note it.\n```json\n{CALL}\n```\nDone.",
        "I will note it.\n\nDone.",
    ),
    "fence without a language": (f"```\n{CALL}\n```", ""),
    "bare": (CALL, ""),
    "bare after a line of prose": (f"Noting it.\n{CALL}", "Noting it."),
    "bare, then a fence of code": (f"{CALL}\n```\nobj['id']\n```", "```\nobj['id']\n```"),
    "arguments as a string": (
        '{"name": "remember", "arguments": "{\\"kind\\": \\"fact\\", \\"text\\": \\"the sea is blue\\"}"}',
        "",
    ),
    "parameters instead of arguments": (
        '{"name": "remember", "parameters": {"kind": "fact", "text": "the sea is blue"}}',
        "",
    ),
    "OpenAI's shape": (
        '{"type": "function", "function": {"name": "remember", "arguments": '
        '{"kind": "fact", "text": "the sea is blue"}}}',
        "",
    ),
}


@pytest.mark.parametrize("form", FORMS)
def test_every_form_of_a_call_becomes_one_openai_tool_call(form: str) -> None:
    text, prose = FORMS[form]
    found = find_calls(text, TOOLS)
    assert not found.attempted
    [call] = found.calls
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "remember"
    assert json.loads(call["function"]["arguments"]) == ARGUMENTS
    assert found.prose == prose


def test_several_calls_in_tags_or_in_an_array() -> None:
    second = '{"name": "read", "arguments": {"path": "a.md"}}'
    for text in (
        f"<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{second}\n</tool_call>",
        f"[{CALL}, {second}]",
    ):
        names = [call["function"]["name"] for call in find_calls(text, TOOLS).calls]
        assert names == ["remember", "read"]


BROKEN = {
    "unknown tool": ('{"name": "forget", "arguments": {}}', "forget", "no offered tool"),
    "missing argument": (
        '{"name": "remember", "arguments": {"kind": "fact"}}',
        "remember",
        "'text' is a required property",
    ),
    "extra argument": (
        '{"name": "remember", "arguments": {"kind": "a", "text": "b", "mood": "c"}}',
        "remember",
        "do not fit its schema",
    ),
    "cut short in a tag": ('<tool_call>\n{"name": "remember", "argu', None, "no valid call"),
    "arguments not an object": ('{"name": "read", "arguments": [1]}', "read", "not a JSON object"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_call_is_an_attempt_naming_its_tool_and_what_is_wrong(case: str) -> None:
    text, named, problem = BROKEN[case]
    found = find_calls(text, TOOLS)
    assert (found.calls, found.attempted, found.named) == ([], True, named)
    assert problem in found.problem


def test_plain_answers_are_prose_even_when_they_are_json() -> None:
    for text in ("The sea is blue.", '{"answer": 42}', "Braces {like this} in a sentence", ""):
        found = find_calls(text, TOOLS)
        assert (found.calls, found.attempted, found.prose) == ([], False, text.strip())


def test_may_open_call() -> None:
    assert all(may_open_call(t) for t in ("", "  <tool", "```js", "{", '{"na'))
    assert not any(may_open_call(t) for t in ("Hello", " I think", "-"))


def _streamed(pieces: list[str]) -> tuple[list[str], TextGate]:
    gate = TextGate()
    return [gate.feed(piece) for piece in pieces], gate


def test_the_text_gate_streams_prose_at_once() -> None:
    out, gate = _streamed(["The sea", " is", " blue."])
    assert out == ["The sea", " is", " blue."]
    assert gate.rest("The sea is blue.") == ""


def test_the_text_gate_holds_back_what_may_be_a_call() -> None:
    out, gate = _streamed([" ", "<tool", "_call>\n{}"])
    assert (out, gate.held) == (["", "", ""], True)
    out, gate = _streamed(["Noting it.", "\n`", "``json\n{"])
    assert (out, gate.held) == (["Noting it.", "\n", ""], True)
    # What the answer turned out to be decides the rest: the prose was all of it.
    assert gate.rest("Noting it.") == ""
    out, gate = _streamed(['{"answer":', " 42}"])
    assert out == ["", ""]
    assert gate.rest('{"answer": 42}') == '{"answer": 42}'
