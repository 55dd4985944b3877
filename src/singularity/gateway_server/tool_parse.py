"""Tool calls found in a local model's free text, as OpenAI `tool_calls`.

Small models write a call in one of a few forms, and all of them are read:

- tagged: `<tool_call>{"name": …, "arguments": {…}}</tool_call>` (the closing tag may be
  missing; several tagged calls give several calls);
- fenced: a Markdown code block (```json … ```) holding the object;
- bare: the object (or an array of objects) alone, or after a line of prose.

Inside, the tool's name is under `name` (or `function`, `tool`) and its arguments under
`arguments` (or `parameters`, `args`), as an object or as a JSON string; OpenAI's own
`{"type": "function", "function": {…}}` shape is read too. A call counts only if it
names an offered tool and its arguments are valid for that tool's schema; otherwise it is
an `attempt` (so that the caller can decode it again under a grammar, or report it).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import jsonschema

from singularity.gateway_server.tool_grammar import ToolSpec
from singularity.jsoncodec import compact

TAGGED: Final = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
FENCED: Final = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)(?:```|$)", re.DOTALL)
NAME_KEYS: Final = ("name", "function", "tool", "tool_name")
ARGUMENT_KEYS: Final = ("arguments", "parameters", "args", "input")
OPENERS: Final = ("<tool_call>", "```", "{", "[")


@dataclass(frozen=True)
class Found:
    """What a model's text holds: valid calls, or an attempt at one, and the prose around."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    attempted: bool = False
    named: str | None = None
    problem: str = ""
    prose: str = ""


def new_call(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI tool call with a fresh id."""
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": compact(dict(arguments))},
    }


def _documents(text: str) -> Iterator[tuple[Any, bool, int, int]]:
    """The JSON value of every tagged, fenced or bare block: (value or None, tagged, span).

    Tagged blocks, when there are any, are the only ones read. Otherwise the fenced blocks
    and the first bare one outside them are read, in the order they appear.
    """
    decoder = json.JSONDecoder()
    tagged = [(m.group(1), m.start(1), m.start(), m.end(), False) for m in TAGGED.finditer(text)]
    blocks = tagged or [
        (m.group(1), m.start(1), m.start(), m.end(), False) for m in FENCED.finditer(text)
    ]
    if not tagged:
        fences = [(start, end) for _, _, start, end, _ in blocks]
        starts = [
            m.start()
            for m in re.finditer(r"(?m)^[ \t]*[\[{]", text)
            if not any(start <= m.start() < end for start, end in fences)
        ]
        blocks += [(text[start:], start, start, len(text), True) for start in starts[:1]]
        blocks.sort(key=lambda block: block[2])
    for body, at, start, end, bare in blocks:
        lead = len(body) - len(body.lstrip())
        try:
            value, used = decoder.raw_decode(body.lstrip())
        except ValueError:
            yield None, bool(tagged), start, end
            continue
        yield value, bool(tagged), start, (at + lead + used if bare else end)


def _shape(document: Any) -> tuple[str | None, Any]:
    """(tool name, raw arguments) of one call object, in any of the shapes read."""
    if not isinstance(document, dict):
        return None, None
    if document.get("type") == "function" and isinstance(document.get("function"), dict):
        document = document["function"]
    name = next((document[k] for k in NAME_KEYS if isinstance(document.get(k), str)), None)
    arguments: Any = next((document[k] for k in ARGUMENT_KEYS if k in document), {})
    return name, arguments


def _arguments(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw or "{}")
        except ValueError:
            return None
    return raw if isinstance(raw, dict) else None


def check(name: str | None, raw: Any, tools: Sequence[ToolSpec]) -> tuple[dict[str, Any], str]:
    """(the call, "") when `name` is offered and `raw` fits its schema, else ({}, why not)."""
    offered = {tool.name: tool for tool in tools}
    if name not in offered:
        return {}, f"no offered tool is named {name!r}"
    arguments = _arguments(raw)
    if arguments is None:
        return {}, f"the arguments of {name} are not a JSON object"
    try:
        jsonschema.validate(arguments, dict(offered[name].parameters))
    except jsonschema.ValidationError as error:
        return {}, f"the arguments of {name} do not fit its schema: {error.message}"
    except jsonschema.SchemaError:
        pass  # a schema the validator cannot read: the runtime validates the call itself
    return new_call(name, arguments), ""


def find_calls(text: str, tools: Sequence[ToolSpec]) -> Found:
    """The calls in `text` (see the module docstring); prose is what lies outside them.

    A block that does not parse, or names no tool, is an attempt when it is tagged or
    mentions a `"name"`; otherwise it is an answer that happens to be JSON (prose).
    """
    calls: list[dict[str, Any]] = []
    spans: list[tuple[int, int]] = []
    named: str | None = None
    for document, tagged, start, end in _documents(text):
        before = len(calls)
        items = document if isinstance(document, list) else [document]
        for item in items:
            name, raw = _shape(item)
            named = named or name
            if name is None:
                if tagged or '"name"' in text[start:end]:
                    return Found(attempted=True, named=named, problem="no valid call in it")
                continue
            call, problem = check(name, raw, tools)
            if not call:
                return Found(attempted=True, named=named, problem=problem)
            calls.append(call)
        if len(calls) > before:
            spans.append((start, end))
    if not calls:
        return Found(prose=text.strip())
    prose = text[: spans[0][0]] + text[spans[-1][1] :]
    return Found(calls=calls, prose=prose.strip())


def may_open_call(text: str) -> bool:
    """Whether free text (so far) could still turn into a call: it starts like one."""
    stripped = text.lstrip()
    return any(opener.startswith(stripped) or stripped.startswith(opener) for opener in OPENERS)
