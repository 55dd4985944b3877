"""The three Most tools (spec §12.3), registered only when a Most token is configured."""

from __future__ import annotations

import uuid
from typing import Any

from singularity.errors import MostError
from singularity.most.client import MostClient
from singularity.tools.base import (
    FunctionTool,
    FunctionToolset,
    Outcome,
    ToolArgumentError,
    ToolDefinition,
)

SERVICES = ["iMessage", "SMS", "RCS"]
_SERVICE = {"type": "string", "enum": SERVICES}
HEALTH = ToolDefinition(
    "most_health",
    "Check Most messaging readiness and active backends",
    {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
)
CREATE_CHAT = ToolDefinition(
    "most_create_chat",
    "Create a Most chat and send its first text message",
    {
        "type": "object",
        "properties": {
            "from": {"type": "string"},
            "to": {"type": "array", "items": {"type": "string"}},
            "text": {"type": "string"},
            "preferred_service": _SERVICE,
        },
        "required": ["from", "to", "text"],
        "additionalProperties": False,
    },
)
SEND_MESSAGE = ToolDefinition(
    "most_send_message",
    "Send a text message to an existing Most chat",
    {
        "type": "object",
        "properties": {
            "chat_id": {"type": "string", "format": "uuid"},
            "text": {"type": "string"},
            "preferred_service": _SERVICE,
        },
        "required": ["chat_id", "text"],
        "additionalProperties": False,
    },
)


def _string(arguments: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    if key not in arguments or (optional and arguments[key] is None):
        if optional:
            return None
        raise ToolArgumentError(f"missing field `{key}`")
    value = arguments[key]
    if not isinstance(value, str):
        raise ToolArgumentError(f"invalid type for `{key}`: expected a string")
    return value


def _strings(arguments: dict[str, Any], key: str) -> list[str]:
    if key not in arguments:
        raise ToolArgumentError(f"missing field `{key}`")
    value = arguments[key]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ToolArgumentError(f"invalid type for `{key}`: expected an array of strings")
    return value


DEFINITIONS = (HEALTH, CREATE_CHAT, SEND_MESSAGE)
"""Most's direct tools, in catalogue order."""


def most_tools(client: MostClient) -> FunctionToolset:
    """`most_health`, `most_create_chat`, `most_send_message` over one Most client."""

    async def health(arguments: dict[str, Any]) -> Outcome:
        try:
            return Outcome.success(await client.health())
        except MostError as error:
            return Outcome.indeterminate("remote", str(error))

    async def create_chat(arguments: dict[str, Any]) -> Outcome:
        sender = _string(arguments, "from")
        recipients = _strings(arguments, "to")
        text = _string(arguments, "text")
        service = _string(arguments, "preferred_service", optional=True)
        try:
            document, chat_id, message_id = await client.create_chat(
                sender, recipients, text, service
            )
        except MostError as error:
            return Outcome.indeterminate("remote", str(error))
        return Outcome.success(document, chat_id=chat_id, message_id=message_id)

    async def send_message(arguments: dict[str, Any]) -> Outcome:
        chat_id = _string(arguments, "chat_id")
        try:
            uuid.UUID(chat_id)
        except ValueError as error:
            raise ToolArgumentError(f"invalid value for `chat_id`: {error}") from None
        text = _string(arguments, "text")
        service = _string(arguments, "preferred_service", optional=True)
        try:
            document, message_id = await client.send_message(chat_id, text, service)
        except MostError as error:
            return Outcome.indeterminate("remote", str(error))
        return Outcome.success(document, chat_id=chat_id, message_id=message_id)

    return FunctionToolset(
        [
            FunctionTool(HEALTH, health),
            FunctionTool(CREATE_CHAT, create_chat),
            FunctionTool(SEND_MESSAGE, send_message),
        ]
    )
