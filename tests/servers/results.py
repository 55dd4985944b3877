"""A real MCP server that returns whatever result it is asked for, for the boundary tests.

    python tests/servers/results.py

`give(text, structured)` answers with one text content item `text` and, when
`structured` is a JSON object text, that object as `structuredContent`: the exact shapes
a third-party server may send, so each output-boundary case can be driven through a
real session.
"""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

server = MCPServer("results", log_level="WARNING")


@server.tool(description="Answer with this text and, optionally, this structured JSON object")
def give(text: str, structured: str = "") -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=json.loads(structured) if structured else None,
    )


if __name__ == "__main__":
    server.run()
