"""A low-level SDK server that behaves the way the high-level API would not let it.

    python tests/servers/bare.py             # `noschema`, `echo`, `slow`
    python tests/servers/bare.py --twice     # also lists `echo` a second time

- `noschema` is listed without `inputSchema`: it must get the spec's default schema.
- with `--twice`, `echo` is listed twice: a duplicate that must fail the catalogue.
- `slow` sleeps, and the server ignores `notifications/cancelled`, so the reply to a
  call whose deadline passed still arrives, late: it must not answer the next call.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (
    CallToolResult,
    JSONRPCNotification,
    JSONRPCResponse,
    ListToolsResult,
    TextContent,
    Tool,
)

OBJECT = {"type": "object"}


def _tools() -> list[Tool]:
    echo = Tool(name="echo", description="Echo", input_schema=OBJECT)
    # The SDK insists on a schema here; `_strip_schema` takes it off the wire.
    bare = Tool(name="noschema", description="A tool with no input schema", input_schema=OBJECT)
    slow = Tool(name="slow", description="Sleep, ignoring cancellation", input_schema=OBJECT)
    return [bare, echo, slow, echo] if "--twice" in sys.argv else [bare, echo, slow]


def _strip_schema(item: SessionMessage) -> SessionMessage:
    message = item.message
    if isinstance(message, JSONRPCResponse):
        for tool in message.result.get("tools", []):
            if tool.get("name") == "noschema":
                tool.pop("inputSchema", None)
    return item


def _is_cancel(item: Any) -> bool:
    message = getattr(item, "message", None)
    return isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled"


async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
    return ListToolsResult(tools=_tools())


async def call_tool(ctx: Any, params: Any) -> CallToolResult:
    arguments = params.arguments or {}
    if params.name == "slow":
        await anyio.sleep(float(arguments.get("seconds", 1)))
        return CallToolResult(content=[TextContent(type="text", text="late")])
    text = f"{params.name} called with {sorted(arguments.items())}"
    return CallToolResult(content=[TextContent(type="text", text=text)])


server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    inbound, received = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outgoing, filtered = anyio.create_memory_object_stream[SessionMessage](0)

    async def take(read_stream: Any) -> None:
        async with read_stream, inbound:
            async for item in read_stream:
                if not _is_cancel(item):
                    await inbound.send(item)

    async def give(write_stream: Any) -> None:
        async with filtered, write_stream:
            async for item in filtered:
                await write_stream.send(_strip_schema(item))

    async with stdio_server() as (read_stream, write_stream), anyio.create_task_group() as group:
        group.start_soon(take, read_stream)
        group.start_soon(give, write_stream)
        await server.run(received, outgoing, server.create_initialization_options())
        group.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
