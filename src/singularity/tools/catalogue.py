"""The tool catalogue (spec §10.1), dispatch of one call (§10.2) and the tool message (§10.3)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from singularity.domain.records import ChatMessage
from singularity.errors import CatalogueError
from singularity.jsoncodec import compact
from singularity.tools.base import Outcome, ToolDefinition, Toolset
from singularity.tools.boundary import BoundaryRejection, check_output

# `\Z`, not `$`: `$` also matches before a final newline, which would let `name\n` in.
TOOL_NAME = re.compile(r"\A[A-Za-z0-9_-]+\Z")
REJECTED_CONTENT = '{"error_code":"sensitive_output_rejected","status":"failed"}'
PRIVATE_PLACEHOLDER = "[private journal content omitted]"


def _refuse_constant(name: str) -> object:
    """`NaN`, `Infinity` and `-Infinity` are not JSON, although Python's parser takes them."""
    raise ValueError(f"{name} is not valid JSON")


class Catalogue:
    """Every tool a being may call, in catalogue order, each routed to its toolset."""

    def __init__(self, toolsets: Sequence[Toolset]) -> None:
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
    """The tool message for one call, and why its content was replaced (if it was)."""

    message: ChatMessage
    rejection: str | None


def tool_message(call_id: str, name: str, outcome: Outcome) -> ToolMessage:
    """The `tool` role message that carries an outcome back to the model."""
    rejection: str | None = None
    try:
        check_output(outcome.content)
        content = compact(
            {
                "chat_id": outcome.chat_id,
                "content": outcome.content,
                "error_code": outcome.error_code,
                "message_id": outcome.message_id,
                "status": outcome.status.value,
            },
            sort_keys=True,
        )
    except BoundaryRejection as error:
        rejection = str(error)
        content = REJECTED_CONTENT
    message: ChatMessage = {
        "role": "tool",
        "content": content,
        "tool_call_id": call_id,
        "name": name,
    }
    return ToolMessage(message, rejection)
