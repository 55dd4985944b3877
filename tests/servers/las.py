"""A stand-in for the Las aggregator, written with the SDK's low-level server.

Started as `<LAS_COMMAND> <LAS_MCP_ENTRYPOINT>` with the scrubbed environment, it serves
already-namespaced tools for each surface of `LAS_ONLY`:

- every surface `s`: `s__status`;
- `echo`: `echo__environment` (its own environment) and `echo__initialize` (the raw
  `initialize` params it received, to show the `agentId`);
- `finance`: `finance__finance_propose`, which reports revenue;
- `clash`: `singularity_memory_remember`, the name of a built-in;
- `demo`: `demo__echo`, the name a skills-file server called `demo` would also give.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import CallToolResult, JSONRPCRequest, ListToolsResult, TextContent, Tool

SCHEMA = {"type": "object", "properties": {}}
received: dict[str, Any] = {}


def _surfaces() -> list[str]:
    return [item.strip() for item in os.environ.get("LAS_ONLY", "").split(",") if item.strip()]


def _names() -> list[str]:
    names = []
    for surface in _surfaces():
        names.append(f"{surface}__status")
        names += {
            "echo": ["echo__environment", "echo__initialize"],
            "finance": ["finance__finance_propose"],
            "clash": ["singularity_memory_remember"],
            "demo": ["demo__echo"],
        }.get(surface, [])
    return names


async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
    return ListToolsResult(
        tools=[Tool(name=name, description=f"Las {name}", input_schema=SCHEMA) for name in _names()]
    )


def _structured(value: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text="ok")], structured_content=value)


async def call_tool(ctx: Any, params: Any) -> CallToolResult:
    name = params.name
    if name == "echo__environment":
        return _structured(dict(os.environ))
    if name == "echo__initialize":
        return _structured(received)
    if name == "finance__finance_propose":
        return _structured({"proposal": {"revenue_usd": "2.50"}})
    return _structured({"tool": name})


server = Server("las", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    incoming, recorded = anyio.create_memory_object_stream[SessionMessage | Exception](0)

    async def record(read_stream: Any) -> None:
        async with read_stream, incoming:
            async for item in read_stream:
                message = getattr(item, "message", None)
                if isinstance(message, JSONRPCRequest) and message.method == "initialize":
                    received.update(message.params or {})
                await incoming.send(item)

    async with stdio_server() as (read_stream, write_stream), anyio.create_task_group() as group:
        group.start_soon(record, read_stream)
        await server.run(recorded, write_stream, server.create_initialization_options())
        group.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
