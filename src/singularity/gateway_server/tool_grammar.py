"""Grammar-constrained tool calls: offered schemas bounded so that a call fits its budget.

The local model's call is `{"name": <tool>, "arguments": <its parameters>}` decoded
under a GBNF grammar built from the tools' JSON schemas. Unbounded parts are bounded
first (`bounded`), as a subset of what each schema admits, so the arguments are valid
for the offered schema and the longest call still fits `max_tokens`.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from singularity.jsoncodec import compact

STRING_CAP: Final = 120
MIN_STRING: Final = 4
ARRAY_CAP: Final = 4
# JSON strings without escapes or control characters: the runtime refuses control
# characters in text arguments, and an escape costs several tokens for one character.
CHAR_RULE: Final = r'char ::= [^"\\\x7F\x00-\x1F]'
CHAR_LINE: Final = re.compile(r"^char ::= .*$", re.MULTILINE)


@dataclass(frozen=True)
class ToolSpec:
    """One offered function."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})


_SCHEMA_MAPS: Final = ("properties", "$defs", "definitions")
_SCHEMA_LISTS: Final = ("anyOf", "oneOf", "allOf", "prefixItems")
_SHAPED: Final = ("type", "enum", "const", "$ref", *_SCHEMA_LISTS, "properties", "items")


def bounded(schema: Any, cap: int = STRING_CAP) -> Any:
    """The schema with finite strings, arrays and objects; it admits only what `schema` does.

    Strings get 1 to `cap` characters, arrays at most `ARRAY_CAP` items, objects without
    listed properties become `{}`, and a schema with no shape at all becomes a string.
    """
    if not isinstance(schema, Mapping):
        return schema
    result = dict(schema)
    for key in _SCHEMA_MAPS:
        if isinstance(result.get(key), Mapping):
            result[key] = {name: bounded(sub, cap) for name, sub in result[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(result.get(key), list):
            result[key] = [bounded(sub, cap) for sub in result[key]]
    if isinstance(result.get("items"), Mapping):
        result["items"] = bounded(result["items"], cap)
    kind = result.get("type")
    if not any(key in result for key in _SHAPED):
        result["type"] = kind = "string"
    if kind == "string" and "enum" not in result and "const" not in result:
        result["maxLength"] = max(min(int(result.get("maxLength", cap)), cap), 1)
        result["minLength"] = min(int(result.get("minLength", 1)) or 1, result["maxLength"])
    elif kind == "array":
        result["maxItems"] = max(
            min(int(result.get("maxItems", ARRAY_CAP)), ARRAY_CAP), int(result.get("minItems", 0))
        )
    elif kind == "object" and not result.get("properties"):
        result.update(properties={}, additionalProperties=False)
    elif kind == "object":
        result["additionalProperties"] = False
    return result


def worst_case(schema: Any) -> tuple[int, int]:
    """(string count, other tokens) of the longest value a bounded schema admits (roughly)."""
    if not isinstance(schema, Mapping):
        return 1, 20
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return 0, max(len(compact(value)) for value in values) + 1
    options = [worst_case(sub) for key in _SCHEMA_LISTS for sub in schema.get(key) or []]
    if options:
        return max(o[0] for o in options), max(o[1] for o in options)
    kind = schema.get("type")
    if kind == "string":
        return 1, 3
    if kind == "array":
        strings, other = worst_case(schema.get("items", {}))
        items = int(schema.get("maxItems", ARRAY_CAP))
        return strings * items, 2 + (other + 2) * items
    if kind == "object":
        parts = [(*worst_case(sub), len(name)) for name, sub in schema["properties"].items()]
        return sum(p[0] for p in parts), 2 + sum(other + name + 5 for _, other, name in parts)
    numbers = {"integer": 17, "number": 40}
    return (
        (1, 20) if "$ref" in schema else (0, numbers.get(kind, 6) if isinstance(kind, str) else 6)
    )


def call_schema(tools: Sequence[ToolSpec], budget: int = 256) -> dict[str, Any]:
    """The schema of one call to one of `tools`, its strings capped to fit `budget` tokens."""
    options = []
    for tool in tools:
        arguments = bounded(dict(tool.parameters) or {"type": "object"}, 1)
        strings, other = worst_case(arguments)
        room = budget - other - len(tool.name) - 30
        cap = max(MIN_STRING, min(STRING_CAP, room // max(strings, 1)))
        options.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": tool.name},
                    "arguments": bounded(dict(tool.parameters) or {"type": "object"}, cap),
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return options[0] if len(options) == 1 else {"anyOf": options}


def parse_call(text: str, tools: Sequence[ToolSpec]) -> dict[str, Any] | None:
    """The OpenAI tool call in a constrained answer, or None if it is cut short."""
    try:
        document = json.loads(text)
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("name") not in {t.name for t in tools}:
        return None
    arguments = document.get("arguments")
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {
            "name": document["name"],
            "arguments": compact(arguments if isinstance(arguments, dict) else {}),
        },
    }


def text_grammar(max_chars: int) -> str:
    """GBNF for a plain answer of 1 to `max_chars` characters, not opening with JSON.

    The tools are listed in every prompt, and a small model asked for prose would
    otherwise often write a call as text, which no one would run.
    """
    return f"root ::= [^{{[\\x00 ] [^\\x00]{{0,{max_chars - 1}}}"


def call_grammar(convert: Callable[[str], str], tools: Sequence[ToolSpec], budget: int) -> str:
    """GBNF of one call to one of `tools` within `budget` tokens; `convert` is schema->GBNF."""
    try:
        source = convert(compact(call_schema(tools, budget)))
    except Exception:  # a schema the converter cannot express: empty arguments
        loose = [ToolSpec(tool.name, tool.description, {"type": "object"}) for tool in tools]
        source = convert(compact(call_schema(loose, budget)))
    return CHAR_LINE.sub(lambda _: CHAR_RULE, str(source))
