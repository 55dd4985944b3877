"""The local model's prompt: OpenAI messages rendered as ChatML, tools listed in the system turn.

Every model served here speaks ChatML (`<|im_start|>role … <|im_end|>`). The offered tools
come first in the system turn, as one line each (name, typed arguments, a short summary),
then the system (and developer) messages, then how to call a tool and when not to: a
JSON object inside `<tool_call>` tags, as Qwen2.5 was trained to write it, and plain text
when nothing needs a tool. Small models follow what they read last, so the instructions
sit next to the conversation, as in the layout Qwen2.5 was trained on; the tool list stays
first, so that a change in the system messages (a being's new memory) leaves it evaluated.
Earlier calls are shown in the same tagged form and tool results as `<tool_response>` user
turns (the results of one round in one turn, as Qwen2.5's own template has them); an
assistant message with neither text nor calls is left out, so that a model is never shown
an empty answer to copy. Everything before the conversation is unchanged from one round to
the next, so that the longest stable prefix of the prompt stays in llama.cpp's cache.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from singularity.gateway_server.tool_grammar import ToolSpec
from singularity.jsoncodec import compact

START: Final = "<|im_start|>"
END: Final = "<|im_end|>"
CALL_OPEN: Final = "<tool_call>\n"
CALL_CLOSE: Final = "\n</tool_call>"
DESCRIBED: Final = 110
TOOLS_INTRO: Final = (
    "You can act by calling tools. One line per tool: its name, its arguments"
    " (a ? marks an optional one) and what it does."
)
CALL_HOWTO: Final = (
    "# Calling a tool\n\n"
    "To call a tool, reply with only a JSON object inside <tool_call></tool_call> tags:\n"
    '<tool_call>\n{"name": "<tool name>", "arguments": {"<argument>": <value>}}\n</tool_call>\n'
    "Call a tool only when the latest message needs what it does, and choose the tool whose"
    " description fits that best. When nothing needs doing, or the tool results above already"
    " did what was asked, reply in plain text."
)


def text_of(content: Any) -> str:
    """A message content (string, null or array of parts) as plain text."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = [
        p.get("text", "") if p.get("type") == "text" else f"[{p.get('type')} omitted]"
        for p in content
    ]
    return "\n".join(parts)


def _kind(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return "any"
    if "enum" in schema:
        return "|".join(json.dumps(value) for value in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_kind(schema.get('items'))}"
    return kind if isinstance(kind, str) else "|".join(map(str, kind))


def signature(tool: ToolSpec) -> str:
    """`- name(arg: type, optional?: type): summary` for one tool."""
    properties = tool.parameters.get("properties")
    required = set(tool.parameters.get("required") or [])
    arguments = ", ".join(
        f"{name}{'' if name in required else '?'}: {_kind(schema)}"
        for name, schema in (properties.items() if isinstance(properties, Mapping) else [])
    )
    summary = re.split(r"[;(]|\. ", tool.description, maxsplit=1)[0].strip()[:DESCRIBED]
    return f"- {tool.name}({arguments}): {summary}".rstrip(": ")


def tools_block(tools: Sequence[ToolSpec]) -> str:
    """The tool list that opens the system turn."""
    lines = "\n".join(signature(tool) for tool in tools)
    return f"# Tools\n\n{TOOLS_INTRO}\n{lines}"


def call_text(name: Any, arguments: Any) -> str:
    """One call as the model is asked to write it."""
    return f"{CALL_OPEN}{compact({'name': name, 'arguments': arguments})}{CALL_CLOSE}"


def _shown_call(call: Mapping[str, Any]) -> str:
    function = call.get("function", {})
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        arguments = function.get("arguments")
    return call_text(function.get("name"), arguments)


class Turn(NamedTuple):
    """One ChatML turn of the conversation."""

    role: str
    text: str
    result: bool = False
    """A tool result: it belongs to the call before it and is never kept without it."""


def render_turns(messages: Sequence[Mapping[str, Any]]) -> list[Turn]:
    """A turn for each non-system message; tool results become user turns, empty answers
    none."""
    turns: list[Turn] = []
    for message in messages:
        role = message.get("role")
        text = text_of(message.get("content"))
        if role == "assistant":
            calls = message.get("tool_calls") or []
            shown = [text] * bool(text.strip()) + [_shown_call(call) for call in calls]
            if shown:
                turns.append(Turn("assistant", "\n".join(shown)))
        elif role == "tool":
            response = f"<tool_response>\n{text}\n</tool_response>"
            if turns and turns[-1].result:  # one round's results share a turn, as in Qwen2.5's
                turns[-1] = Turn("user", f"{turns[-1].text}\n{response}", True)
            else:
                turns.append(Turn("user", response, True))
        elif role == "user":
            turns.append(Turn("user", text))
    return turns


def render_prompt(system: str, turns: Sequence[Turn]) -> str:
    """The ChatML prompt, ending with an open assistant turn."""
    parts = [f"{START}system\n{system}{END}\n"] if system else []
    parts.extend(f"{START}{turn.role}\n{turn.text}{END}\n" for turn in turns)
    parts.append(f"{START}assistant\n")
    return "".join(parts)


def system_text(messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolSpec]) -> str:
    """The tool list, every system message, then how to call one (when tools are offered)."""
    roles = ("system", "developer")
    texts = [text_of(m.get("content")) for m in messages if m.get("role") in roles]
    if tools:
        texts = [tools_block(tools), *texts, CALL_HOWTO]
    return "\n\n".join(text for text in texts if text)
