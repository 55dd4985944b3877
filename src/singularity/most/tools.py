"""The three Most tools (spec §12.3), registered only when a Most token is configured."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Annotated, Any

from singularity.errors import MostError
from singularity.most.client import MostClient
from singularity.tools.arguments import MISSING
from singularity.tools.base import FunctionToolset, JsonObject, Outcome, ToolArgumentError
from singularity.tools.typed import Key, tool, toolset

SERVICES = ["iMessage", "SMS", "RCS"]


@dataclass(frozen=True)
class Field:
    """A string (or, with `many`, an array of strings) checked the way Most's own API
    reports a bad field: `missing field`, `invalid type`, `invalid value`."""

    many: bool = False
    extra: tuple[tuple[str, Any], ...] = ()
    """More of the schema (an `enum`, a `format`), shown to the model, never checked."""
    uuid: bool = False

    def schema(self) -> JsonObject:
        if self.many:
            return {"type": "array", "items": {"type": "string"}}
        return {"type": "string", **dict(self.extra)}

    def parse(self, key: str, value: Any) -> Any:
        if value is MISSING:
            raise ToolArgumentError(f"missing field `{key}`")
        if self.many:
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ToolArgumentError(f"invalid type for `{key}`: expected an array of strings")
            return value
        if not isinstance(value, str):
            raise ToolArgumentError(f"invalid type for `{key}`: expected a string")
        if self.uuid:
            try:
                uuid.UUID(value)
            except ValueError as error:
                raise ToolArgumentError(f"invalid value for `{key}`: {error}") from None
        return value


String = Annotated[str, Field()]
Service = Annotated[str | None, Field(extra=(("enum", SERVICES),))]


@tool("most_health", "Check Most messaging readiness and active backends")
async def health(client: MostClient) -> Outcome:
    try:
        return Outcome.success(await client.health())
    except MostError as error:
        return Outcome.indeterminate("remote", str(error))


@tool("most_create_chat", "Create a Most chat and send its first text message")
async def create_chat(
    client: MostClient,
    *,
    sender: Annotated[str, Field(), Key("from")],
    to: Annotated[list[str], Field(many=True)],
    text: String,
    preferred_service: Service = None,
) -> Outcome:
    try:
        document, chat_id, message_id = await client.create_chat(
            sender, to, text, preferred_service
        )
    except MostError as error:
        return Outcome.indeterminate("remote", str(error))
    return Outcome.success(document, chat_id=chat_id, message_id=message_id)


@tool("most_send_message", "Send a text message to an existing Most chat")
async def send_message(
    client: MostClient,
    *,
    chat_id: Annotated[str, Field(extra=(("format", "uuid"),), uuid=True)],
    text: String,
    preferred_service: Service = None,
) -> Outcome:
    try:
        document, message_id = await client.send_message(chat_id, text, preferred_service)
    except MostError as error:
        return Outcome.indeterminate("remote", str(error))
    return Outcome.success(document, chat_id=chat_id, message_id=message_id)


MOST_TOOLS = (health, create_chat, send_message)
"""Most's direct tools, in catalogue order."""
HEALTH, CREATE_CHAT, SEND_MESSAGE = DEFINITIONS = tuple(each.definition for each in MOST_TOOLS)


def most_tools(client: MostClient) -> FunctionToolset:
    """`most_health`, `most_create_chat`, `most_send_message` over one Most client."""
    return toolset(client, MOST_TOOLS)
