"""A hostile MCP server: raw JSON-RPC lines over stdio, written by hand byte for byte.

    python tests/servers/hostile.py

No SDK: each answer is text this script writes itself, so it can send what a library
would refuse to produce.

- `block` writes the file named by its `marker` argument, then never answers: a test
  waits for the file and kills the runtime while the call is in flight.
- `surrogate` answers a result whose text holds a lone surrogate escape (`\\ud800`), in
  the content (`where: "text"`), the structured content (`"structured"`) or an
  `isError` result (`"error"`).
- `echo` answers its `text` argument back, in the content and the structured content.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

SURROGATE = "\\ud800"
TOOLS = [
    {
        "name": "block",
        "description": "Touch a marker file, then hang",
        "inputSchema": {"type": "object", "properties": {"marker": {"type": "string"}}},
    },
    {
        "name": "surrogate",
        "description": "Answer a lone surrogate",
        "inputSchema": {"type": "object", "properties": {"where": {"type": "string"}}},
    },
    {
        "name": "echo",
        "description": "Echo a text back",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
]


def _send(text: str) -> None:
    os.write(1, text.encode("utf-8") + b"\n")


def _result(request_id: Any, result_json: str) -> None:
    _send(f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"result":{result_json}}}')


def _call(request_id: Any, params: dict[str, Any]) -> None:
    name = params.get("name")
    arguments = params.get("arguments") or {}
    if name == "block":
        with open(str(arguments.get("marker")), "w", encoding="utf-8") as marker:
            marker.write(str(os.getpid()))
        time.sleep(3600)
    elif name == "surrogate":
        where = arguments.get("where", "text")
        text = f'"odd {SURROGATE} text"'
        if where == "structured":
            body = f'{{"content":[],"structuredContent":{{"note":{text}}}}}'
        else:
            error = "true" if where == "error" else "false"
            body = f'{{"content":[{{"type":"text","text":{text}}}],"isError":{error}}}'
        _result(request_id, body)
    elif name == "echo":
        text = json.dumps(str(arguments.get("text", "")))
        body = (
            f'{{"content":[{{"type":"text","text":{text}}}],"structuredContent":{{"text":{text}}}}}'
        )
        _result(request_id, body)
    else:
        _send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {"code": -32602, "message": f"unknown tool {name}"},
                }
            )
        )


def main() -> None:
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        method = request.get("method")
        request_id = request.get("id")
        if method == "initialize":
            version = request.get("params", {}).get("protocolVersion", "2024-11-05")
            _result(
                request_id,
                json.dumps(
                    {
                        "protocolVersion": version,
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "hostile", "version": "1"},
                    }
                ),
            )
        elif method == "tools/list":
            _result(request_id, json.dumps({"tools": TOOLS}))
        elif method == "tools/call":
            _call(request_id, request.get("params", {}))
        elif method == "ping":
            _result(request_id, "{}")
        elif request_id is not None:
            _send(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "error": {"code": -32601, "message": "method not found"},
                    }
                )
            )


if __name__ == "__main__":
    main()
