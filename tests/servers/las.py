"""A Las written from the spec's section 13 alone: raw JSON-RPC lines over stdio, no SDK.

It checks every byte it receives against what §13.3-13.4 say the runtime sends: each
line compact JSON (the bytes are exactly the compact serialization of what they hold)
ending in `\\n`; `initialize` first, with id 1 and params exactly `protocolVersion`
`2024-11-05`, `capabilities` `{}`, `clientInfo` `{name: singularity, version}`, then
`agentId` when the runtime has one; no `notifications/initialized`, ever; `tools/list`
with params `{}`; `tools/call` with params `{name, arguments}`; ids counting up by one.
Every line and every violation is kept, and `wire__received` returns them.

Tools, for each surface `s` of `LAS_ONLY`: `s__status`; `echo` adds
`echo__environment` and `echo__initialize`; `wire` adds `wire__received` and the quirks
below;
`finance` adds `finance__finance_propose` (revenue `2.50`); `clash` serves
`singularity_memory_remember`; `demo` serves `demo__echo`. The item `quirk-version` of
`LAS_ONLY` makes `initialize` answer protocol `2025-06-18`.

Quirks: `wire__garbage` writes a line that is not JSON and never answers; `wire__noise`
writes a blank line and a notification before its answer; `wire__wrong_id` answers with
another id; `wire__late` answers only after `seconds`; `wire__rpc_error` answers a
JSON-RPC error; `wire__no_result` answers neither result nor error; `wire__exit` ends
the process without answering.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

SCHEMA = {"type": "object", "properties": {}}
QUIRKS = [
    "wire__received",
    "wire__garbage",
    "wire__noise",
    "wire__wrong_id",
    "wire__late",
    "wire__rpc_error",
    "wire__no_result",
    "wire__exit",
]
received: list[str] = []
violations: list[str] = []
initialize_params: dict[str, Any] = {}


def _items() -> list[str]:
    return [item.strip() for item in os.environ.get("LAS_ONLY", "").split(",") if item.strip()]


def _names() -> list[str]:
    names = []
    for surface in _items():
        if surface.startswith("quirk-"):
            continue
        names.append(f"{surface}__status")
        names += {
            "echo": ["echo__environment", "echo__initialize"],
            "wire": QUIRKS,
            "finance": ["finance__finance_propose"],
            "clash": ["singularity_memory_remember"],
            "demo": ["demo__echo"],
        }.get(surface, [])
    return names


def _send(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, separators=(",", ":"), ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _answer(request_id: Any, result: Any) -> None:
    _send({"jsonrpc": "2.0", "id": request_id, "result": result})


def _structured(value: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": "ok"}],
        "structuredContent": value,
        "isError": False,
    }


def _check(raw: bytes, expected_id: int) -> dict[str, Any] | None:
    """The request a line holds, noting every way it differs from §13."""
    if not raw.endswith(b"\n"):
        violations.append(f"line without a newline: {raw!r}")
    text = raw.rstrip(b"\n").decode("utf-8")
    received.append(text)
    message = json.loads(text)
    if json.dumps(message, separators=(",", ":"), ensure_ascii=False) != text:
        violations.append(f"not compact JSON: {text}")
    if isinstance(message, dict) and "id" not in message:
        violations.append(f"a notification was sent: {text}")
        return None
    if list(message) != ["jsonrpc", "id", "method", "params"] or message["jsonrpc"] != "2.0":
        violations.append(f"not a JSON-RPC 2.0 request with params: {text}")
        return message if isinstance(message, dict) and "id" in message else None
    if message["id"] != expected_id or isinstance(message["id"], bool):
        violations.append(f"id {message['id']!r} where {expected_id} was due")
    method, params = message["method"], message["params"]
    if expected_id == 1 and method != "initialize":
        violations.append(f"{method} before initialize")
    if method == "initialize":
        keys = ["protocolVersion", "capabilities", "clientInfo"]
        if "agentId" in params:
            keys.append("agentId")
        client = params.get("clientInfo")
        if (
            list(params) != keys
            or params["protocolVersion"] != "2024-11-05"
            or params["capabilities"] != {}
            or not isinstance(client, dict)
            or list(client) != ["name", "version"]
            or client["name"] != "singularity"
            or not isinstance(client["version"], str)
        ):
            violations.append(f"initialize params differ from §13.3: {text}")
    elif method == "tools/list" and params != {}:
        violations.append(f"tools/list params are not {{}}: {text}")
    elif method == "tools/call" and (
        list(params) != ["name", "arguments"] or not isinstance(params["arguments"], dict)
    ):
        violations.append(f"tools/call params are not {{name, arguments}}: {text}")
    elif method not in ("initialize", "tools/list", "tools/call"):
        violations.append(f"unexpected method {method}")
    return message


def _call(request_id: Any, name: str, arguments: dict[str, Any]) -> None:
    if name == "echo__environment":
        _answer(request_id, _structured(dict(os.environ)))
    elif name == "echo__initialize":
        _answer(request_id, _structured(initialize_params))
    elif name == "wire__received":
        _answer(request_id, _structured({"lines": received, "violations": violations}))
    elif name == "finance__finance_propose":
        _answer(request_id, _structured({"proposal": {"revenue_usd": "2.50"}}))
    elif name == "wire__garbage":
        sys.stdout.write("this is not JSON\n")
        sys.stdout.flush()
    elif name == "wire__noise":
        sys.stdout.write("\n")
        _send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "hi"}})
        _answer(request_id, _structured({"tool": name}))
    elif name == "wire__wrong_id":
        _answer(request_id + 100, _structured({"tool": name}))
    elif name == "wire__late":
        time.sleep(float(arguments.get("seconds", 2)))
        _answer(request_id, _structured({"tool": name, "late": True}))
    elif name == "wire__rpc_error":
        _send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": "boom"}})
    elif name == "wire__no_result":
        _send({"jsonrpc": "2.0", "id": request_id})
    elif name == "wire__exit":
        sys.exit(0)
    else:
        _answer(request_id, _structured({"tool": name}))


def main() -> None:
    expected = 1
    for raw in sys.stdin.buffer:
        message = _check(raw, expected)
        if message is None:
            continue
        expected += 1
        request_id, method = message["id"], message.get("method")
        params = message.get("params") or {}
        if method == "initialize":
            initialize_params.update(params)
            version = "2025-06-18" if "quirk-version" in _items() else "2024-11-05"
            _answer(
                request_id,
                {
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "las", "version": "0.0.0"},
                },
            )
        elif method == "tools/list":
            tools = [
                {"name": n, "description": f"Las {n}", "inputSchema": SCHEMA} for n in _names()
            ]
            _answer(request_id, {"tools": tools})
        elif method == "tools/call":
            _call(request_id, params.get("name", ""), params.get("arguments", {}))


if __name__ == "__main__":
    main()
