"""The tool catalogue (spec §10.1), dispatch of one call (§10.2) and the tool message (§10.3).

The tool message carries the outcome across the output boundary. In `strict` mode a
rejected result becomes the fixed two-key content of §10.3. In `redact` mode (decision
21) a result that passes with replacements says how many and why (`redacted`, a sixth
key, present only then), and a rejected one tells the model which limit it broke and
how the call itself ended.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from singularity.domain.records import ChatMessage
from singularity.errors import CatalogueError
from singularity.jsoncodec import compact
from singularity.tools.base import Outcome, ToolDefinition, Toolset
from singularity.tools.output_boundary import OutputBoundary

# `\Z`, not `$`: `$` also matches before a final newline, which would let `name\n` in.
TOOL_NAME = re.compile(r"\A[A-Za-z0-9_-]+\Z")
REJECTED_CONTENT = '{"error_code":"sensitive_output_rejected","status":"failed"}'
WITHHELD_CODE = "output_rejected"
# Saved in place of a private tool's arguments and result. It passes the output boundary in
# every mode, so a later cycle sees the call's real status (never a rejection).
PRIVATE_PLACEHOLDER = "(private journal content omitted)"


def _refuse_constant(name: str) -> object:
    """`NaN`, `Infinity` and `-Infinity` are not JSON, although Python's parser takes them."""
    raise ValueError(f"{name} is not valid JSON")


class Catalogue:
    """Every tool a being may call, in catalogue order, each routed to its toolset."""

    def __init__(self, toolsets: Sequence[Toolset], *, boundary: OutputBoundary) -> None:
        self.boundary = boundary
        """What a result must pass to reach the conversation."""
        self._routes: dict[str, Toolset] = {}
        self._definitions: list[ToolDefinition] = []
        for toolset in toolsets:
            for definition in toolset.definitions():
                self._register(definition, toolset)

    def _register(self, definition: ToolDefinition, toolset: Toolset) -> None:
        name = definition.name
        if not TOOL_NAME.match(name):
            raise CatalogueError(f"invalid tool name: {name}")
        if not isinstance(definition.parameters, dict):
            raise CatalogueError(f"tool schema is not an object: {name}")
        if name in self._routes:
            raise CatalogueError(f"duplicate tool: {name}")
        self._routes[name] = toolset
        self._definitions.append(definition)

    @property
    def definitions(self) -> list[ToolDefinition]:
        """The definitions in catalogue order."""
        return list(self._definitions)

    def wire(self) -> list[dict[str, Any]]:
        """The `tools` array of a completion request."""
        return [definition.wire() for definition in self._definitions]

    def is_private(self, name: str) -> bool:
        """Whether the named tool's arguments and results must stay out of saved state."""
        return any(d.name == name and d.private for d in self._definitions)

    def __contains__(self, name: object) -> bool:
        return name in self._routes

    async def dispatch(self, name: str, arguments_text: str) -> Outcome:
        """Run one call: parse its arguments, find its tool, route it."""
        try:
            arguments = json.loads(arguments_text, parse_constant=_refuse_constant)
        except ValueError as error:  # JSONDecodeError, or a refused constant
            return Outcome.failed("invalid_arguments", f"invalid JSON arguments: {error}")
        except RecursionError:
            return Outcome.failed("invalid_arguments", "invalid JSON arguments: nested too deeply")
        if not isinstance(arguments, dict):
            return Outcome.failed("invalid_arguments", "tool arguments must be a JSON object")
        toolset = self._routes.get(name)
        if toolset is None:
            return Outcome.failed("unknown_tool", "tool is not in the current catalog")
        return await toolset.call(name, arguments)


@dataclass(frozen=True)
class ToolMessage:
    """The tool message for one call, why its content was withheld, and what was redacted."""

    message: ChatMessage
    rejection: str | None
    seen_status: str
    """The status the model was shown: a withheld result is shown as failed."""
    redactions: Mapping[str, int] = field(default_factory=dict)


def withheld_message(reason: str, status: str) -> str:
    """What redact mode tells the model about a result it may not see."""
    return f"the result was withheld by the output boundary ({reason}); the call ended {status}"


def private_message(call_id: str, name: str, shown: ToolMessage) -> ChatMessage:
    """What is saved of a private tool's message: its status and error code, never its text."""
    if shown.rejection is not None:
        return shown.message  # the rejection carries no content of the call
    sent = json.loads(str(shown.message["content"]))
    content = compact(
        {
            "chat_id": None,
            "content": PRIVATE_PLACEHOLDER,
            "error_code": sent["error_code"],
            "message_id": None,
            "status": sent["status"],
        },
        sort_keys=True,
    )
    return {"role": "tool", "content": content, "tool_call_id": call_id, "name": name}


def tool_message(
    call_id: str, name: str, outcome: Outcome, boundary: OutputBoundary
) -> ToolMessage:
    """The `tool` role message that carries an outcome back to the model."""
    bounded = boundary.apply(outcome.content)
    envelope: dict[str, Any] = {
        "chat_id": outcome.chat_id,
        "content": bounded.content,
        "error_code": outcome.error_code,
        "message_id": outcome.message_id,
        "status": outcome.status.value,
    }
    if bounded.rejection is not None and boundary.mode == "strict":
        content = REJECTED_CONTENT
    else:
        if bounded.rejection is not None:
            envelope["content"] = {
                "message": withheld_message(bounded.rejection, outcome.status.value)
            }
            envelope["error_code"] = WITHHELD_CODE
            envelope["status"] = "failed"
        elif bounded.redactions:
            envelope["redacted"] = {"count": bounded.redacted, "reasons": dict(bounded.redactions)}
        content = compact(envelope, sort_keys=True)
    message: ChatMessage = {
        "role": "tool",
        "content": content,
        "tool_call_id": call_id,
        "name": name,
    }
    seen = outcome.status.value if bounded.rejection is None else "failed"
    return ToolMessage(message, bounded.rejection, seen, bounded.redactions)
