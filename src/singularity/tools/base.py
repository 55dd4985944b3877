"""The one tool protocol: definitions, outcomes and toolsets.

Built-in tools, MCP skills and Most all present themselves as a `Toolset`: a list of
definitions and an async `call`. The loop never knows where a tool came from. What a
tool reports back is an `Outcome` the model sees; a failure the model caused is an
outcome, never an exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

JsonObject = dict[str, Any]


class Status(str, Enum):
    """The status of one tool call (spec §10.2)."""

    SUCCESS = "success"
    FAILED = "failed"
    INDETERMINATE = "indeterminate"


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as the model sees it: name, description and JSON-schema parameters."""

    name: str
    description: str
    parameters: JsonObject
    private: bool = False
    """Arguments and results stay out of saved state (the private journal's tools)."""

    def wire(self) -> JsonObject:
        """The OpenAI `tools` entry for this definition."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class Outcome:
    """What one tool call produced: status, content and an optional error code."""

    status: Status
    content: Any
    error_code: str | None = None
    chat_id: str | None = None
    message_id: str | None = None

    @classmethod
    def success(cls, content: Any, **ids: str | None) -> Outcome:
        """A successful result."""
        return cls(Status.SUCCESS, content, None, **ids)

    @classmethod
    def failed(cls, error_code: str, message: str) -> Outcome:
        """A failure built by the runtime: content `{"message": …}`."""
        return cls(Status.FAILED, {"message": message}, error_code)

    @classmethod
    def indeterminate(cls, error_code: str, message: str) -> Outcome:
        """A call whose effect is unknown; never replayed automatically."""
        return cls(Status.INDETERMINATE, {"message": message}, error_code)


class ToolArgumentError(Exception):
    """Raised inside a tool when the model's arguments break a rule; becomes a failed outcome."""

    def __init__(self, message: str, error_code: str = "invalid_arguments") -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code


class Toolset(Protocol):
    """A source of tools: built-ins, an MCP server, Most."""

    def definitions(self) -> Sequence[ToolDefinition]:
        """The tools this set offers, in catalogue order."""
        ...

    async def call(self, name: str, arguments: JsonObject) -> Outcome:
        """Run one tool; the name is one of `definitions()`."""
        ...


Handler = Callable[[JsonObject], Awaitable[Outcome]]


@dataclass(frozen=True)
class FunctionTool:
    """A built-in tool: its definition and an async handler."""

    definition: ToolDefinition
    handler: Handler


@dataclass
class FunctionToolset:
    """A toolset of built-in function tools; argument errors become failed outcomes."""

    tools: list[FunctionTool] = field(default_factory=list)

    def definitions(self) -> Sequence[ToolDefinition]:
        """The definitions, in the order the tools were added."""
        return [tool.definition for tool in self.tools]

    async def call(self, name: str, arguments: JsonObject) -> Outcome:
        """Run the named tool."""
        for tool in self.tools:
            if tool.definition.name == name:
                try:
                    return await tool.handler(arguments)
                except ToolArgumentError as error:
                    return Outcome.failed(error.error_code, error.message)
        raise KeyError(name)
