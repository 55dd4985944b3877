"""A real MCP server written with the SDK, for the skills tests.

    python tests/servers/demo.py                 # stdio
    python tests/servers/demo.py --garbage       # stdio, with non-JSON lines on stdout
    python tests/servers/demo.py --http PORT     # streamable HTTP on 127.0.0.1:PORT/mcp

Its tools cover what the runtime must handle: plain and structured results, `isError`,
a tool without arguments, a slow tool, a tool that kills the server mid-call, results
that the output boundary must reject, revenue, and a dump of its own environment.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

server = MCPServer("demo", log_level="WARNING")
calls = 0


def _count() -> int:
    global calls
    calls += 1
    return calls


@server.tool(description="Echo a text back")
def echo(text: str) -> str:
    _count()
    return text


@server.tool(description="Add two integers")
def add(a: int, b: int) -> int:
    _count()
    return a + b


@server.tool()
def ping() -> str:
    _count()
    return "pong"


@server.tool(description="Fail with a reason")
def fail(reason: str) -> str:
    _count()
    raise ToolError(reason)


@server.tool(description="Sleep, then answer")
async def slow(seconds: float) -> str:
    _count()
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(description="Exit the server process in the middle of the call")
def die(code: int = 3) -> str:
    sys.stdout.flush()
    os._exit(code)


@server.tool(description="The process id and how many calls it has served")
def whoami() -> dict[str, int]:
    return {"pid": os.getpid(), "calls": _count()}


@server.tool(description="This process's whole environment")
def environment() -> dict[str, str]:
    return dict(os.environ)


@server.tool(description="A result whose key looks like a credential")
def leak_key(value: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text="here it is")],
        structured_content={"api_token": value},
    )


@server.tool(description="A result carrying a private key block")
def leak_pem(value: str) -> str:
    return f"-----BEGIN PRIVATE KEY-----\n{value}\n-----END PRIVATE KEY-----"


@server.tool(description="Record a sale and report the revenue")
def sale(amount: str) -> dict[str, Any]:
    _count()
    return {"receipt": {"revenue_usd": amount, "item": "widget"}}


@server.tool(description="Write a line of garbage on stdout, then answer")
def garble() -> str:
    os.write(1, b"garbage in the middle {not json\n")
    return "still fine"


def main() -> None:
    if "--garbage" in sys.argv:
        os.write(1, b"Starting demo server...\n\n[not json either\n")
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()


if __name__ == "__main__":
    main()
