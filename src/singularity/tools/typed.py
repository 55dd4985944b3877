"""Tools from typed functions: `@tool` derives a tool's schema and argument checks.

    @tool("singularity_memory_recall", "Recall persistent memories containing a query")
    async def recall(mind: Mind, *, query: Annotated[str, Text(1024)]) -> Outcome: ...

The keyword-only parameters are the tool's arguments, in the order of its schema; one
without a default is required. Each is annotated with its kind (`singularity.tools.
arguments`): `Annotated[str, Text(64)]`, or a plain `str`, `int`, `float`, `bool` or
`Literal[...]`. The parameters before them are the context the tool is bound to
(`bind`). The schema is closed (`additionalProperties: false`); an argument it does not
name is ignored. A JSON null stands for an absent argument where the default is None.
The values are checked in the order of the parameters, before the function runs; the
first that breaks its kind's rule is a `ToolArgumentError`, which a toolset returns to
the model as a failed outcome.
"""

from __future__ import annotations

import asyncio
import inspect
import types
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

from singularity.tools.arguments import MISSING, Choice, Kind
from singularity.tools.base import (
    FunctionTool,
    FunctionToolset,
    JsonObject,
    Outcome,
    ToolArgumentError,
    ToolDefinition,
)

C = TypeVar("C", contravariant=True)
R = TypeVar("R", covariant=True)


@dataclass(frozen=True)
class Plain:
    """A JSON value of one type, checked with `isinstance` (a boolean is no number)."""

    json_type: str
    python_type: type | tuple[type, ...]

    def schema(self) -> JsonObject:
        return {"type": self.json_type}

    def parse(self, key: str, value: Any) -> Any:
        wrong_bool = isinstance(value, bool) and self.json_type != "boolean"
        if wrong_bool or not isinstance(value, self.python_type):
            raise ToolArgumentError(f"{key} is invalid")
        return value


_PLAIN: dict[Any, Kind] = {
    str: Plain("string", str),
    int: Plain("integer", int),
    float: Plain("number", (int, float)),
    bool: Plain("boolean", bool),
}


@dataclass(frozen=True)
class Key:
    """The JSON key of an argument whose parameter cannot bear its name (`from`)."""

    key: str


@dataclass(frozen=True)
class Argument:
    """One argument of a tool: its JSON key, its parameter, its kind and its default
    (`inspect.Parameter.empty`: none, it is required)."""

    key: str
    name: str
    kind: Kind
    default: Any

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty

    def value(self, arguments: JsonObject) -> Any:
        """The checked value of this argument in a model's `arguments`."""
        value = arguments.get(self.key, MISSING)
        if self.required:
            return self.kind.parse(self.key, value)
        if value is MISSING or (value is None and self.default is None):
            return self.default
        return self.kind.parse(self.key, value)


class TypedTool(Generic[C, R]):
    """A tool made from a typed function: its definition, and the function behind it."""

    def __init__(
        self, definition: ToolDefinition, function: Callable[..., R], arguments: Sequence[Argument]
    ) -> None:
        self.definition = definition
        self.function = function
        self.arguments = tuple(arguments)

    @property
    def name(self) -> str:
        return self.definition.name

    def parse(self, arguments: JsonObject) -> dict[str, Any]:
        """The checked values of a model's arguments, by key; else `ToolArgumentError`."""
        return {argument.name: argument.value(arguments) for argument in self.arguments}

    def __call__(self, context: C, arguments: JsonObject) -> R:
        """Check the arguments, then run the function on `context`."""
        return self.function(context, **self.parse(arguments))

    def bind(self: TypedTool[C, Awaitable[Outcome]], context: C) -> FunctionTool:
        """The tool bound to `context`, for a `FunctionToolset`."""

        async def handle(arguments: JsonObject) -> Outcome:
            return await self(context, arguments)

        return FunctionTool(self.definition, handle)

    def bind_in_thread(self: TypedTool[C, Outcome], context: C) -> FunctionTool:
        """The tool bound to `context`, its function run in a worker thread."""

        async def handle(arguments: JsonObject) -> Outcome:
            return await asyncio.to_thread(self, context, arguments)

        return FunctionTool(self.definition, handle)

    def outcome(self: TypedTool[C, Outcome], context: C, arguments: JsonObject) -> Outcome:
        """Run the tool on `context`; an argument error is its failed outcome."""
        try:
            return self(context, arguments)
        except ToolArgumentError as error:
            return Outcome.failed(error.error_code, error.message)


def toolset(context: C, tools: Sequence[TypedTool[C, Awaitable[Outcome]]]) -> FunctionToolset:
    """A toolset of `tools`, each bound to `context`, in the order given."""
    return FunctionToolset([each.bind(context) for each in tools])


def tool(
    name: str, description: str, *, private: bool = False
) -> Callable[[Callable[..., R]], TypedTool[Any, R]]:
    """Make a tool of a typed function (see the module docstring)."""

    def decorate(function: Callable[..., R]) -> TypedTool[Any, R]:
        arguments = arguments_of(function)
        properties = {argument.key: argument.kind.schema() for argument in arguments}
        parameters = {
            "type": "object",
            "properties": properties,
            "required": [argument.key for argument in arguments if argument.required],
            "additionalProperties": False,
        }
        return TypedTool(
            ToolDefinition(name, description, parameters, private), function, arguments
        )

    return decorate


def arguments_of(function: Callable[..., Any]) -> list[Argument]:
    """The tool arguments of `function`: its keyword-only parameters, with their kinds."""
    hints = typing.get_type_hints(function, include_extras=True)
    found: list[Argument] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        hint = _without_none(hints.get(parameter.name))
        keys = [extra.key for extra in getattr(hint, "__metadata__", ()) if isinstance(extra, Key)]
        key = keys[0] if keys else parameter.name
        found.append(Argument(key, parameter.name, kind_of(function, key, hint), parameter.default))
    return found


def kind_of(function: Callable[..., Any], key: str, hint: Any) -> Kind:
    """The argument kind an annotation names."""
    hint = _without_none(hint)
    if typing.get_origin(hint) is Annotated:
        kinds = [extra for extra in hint.__metadata__ if hasattr(extra, "parse")]
        if len(kinds) == 1:
            found: Kind = kinds[0]
            return found
    elif typing.get_origin(hint) is Literal:
        return Choice(tuple(str(option) for option in typing.get_args(hint)))
    else:
        plain = _PLAIN.get(hint)
        if plain is not None:
            return plain
    raise TypeError(
        f"argument {key} of tool function {function.__qualname__} needs a kind: "
        "Annotated[..., <kind>], str, int, float, bool or Literal[...]"
    )


def _without_none(hint: Any) -> Any:
    """`str` for `str | None`; any other hint as it is."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return hint
    members = [each for each in typing.get_args(hint) if each is not type(None)]
    return members[0] if len(members) == 1 else hint
