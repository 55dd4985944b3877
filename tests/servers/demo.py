"""A real MCP server written with the SDK, for the skills tests.

    python tests/servers/demo.py                 # stdio
    python tests/servers/demo.py --garbage       # stdio, with non-JSON lines on stdout
    python tests/servers/demo.py --linger        # stdio, does not exit when stdin closes
    python tests/servers/demo.py --http PORT     # streamable HTTP on 127.0.0.1:PORT/mcp

Its tools cover what the runtime must handle: plain and structured results, `isError`,
a tool without arguments, a tool that kills the server mid-call, results that the
output boundary must reject, revenue, and a dump of its own environment.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

server = MCPServer("demo", log_level="WARNING")
# Canaries: the tests look for them in everything a being saved.
LEAKED_TOKEN = "tok-canary-91f2c7e4"
LEAKED_KEY = "MIIEcanary0d4e77aa"
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
def leak_key() -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text="here it is")],
        structured_content={"api_token": LEAKED_TOKEN},
    )


@server.tool(description="A result carrying a private key block")
def leak_pem() -> str:
    return f"-----BEGIN PRIVATE KEY-----\n{LEAKED_KEY}\n-----END PRIVATE KEY-----"


@server.tool(description="Record a sale and report the revenue")
def sale(amount: str) -> dict[str, Any]:
    _count()
    return {"receipt": {"revenue_usd": amount, "item": "widget"}}


def main() -> None:
    if "--linger" in sys.argv:
        # A non-daemon thread keeps the process alive after stdin closes: only a kill ends it.
        threading.Thread(target=time.sleep, args=(3600,)).start()
    if "--garbage" in sys.argv:
        os.write(1, b"Starting demo server...\n\n[not json either\n")
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()


if __name__ == "__main__":
    main()
