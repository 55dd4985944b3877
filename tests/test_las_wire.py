"""The Las wire, byte for byte, against a Las written from spec §13 alone (tests/servers/las.py).

Contract (§13.3-13.4): `initialize` is the first line, id 1, params exactly
`{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"singularity",
"version":<v>},"agentId":<id>}`; a reply with another version is the permanent
`mcp: Las negotiated an unsupported MCP version`; no `notifications/initialized` is ever
sent; `tools/list` carries params `{}`; `tools/call` carries `{"name","arguments"}`; ids
count up from 1. Reading a reply: blank lines and notifications are skipped; a line that
is not JSON is `non-JSON Las stdout: …` at once; another id is `Las returned an
unexpected response id`; an `error` member is `JSON-RPC <code>: <message>`; no result is
`Las response has no result`; the end of stdout is `Las closed stdout`; a missed deadline
is `Las request deadline exceeded: tools/call`, and the late reply never answers the next
call. Each of these is an indeterminate `mcp` outcome of the call; Las is restarted for
a later call after it stopped.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.errors import McpError
from singularity.skills import Skills, plan_skills, start_skills
from singularity.skills.toolset import McpToolset
from singularity.tools.base import Outcome, Status
from tests.servers import as_flags, las_options
from tests.support.loop_http import Result

TIMEOUT = 180.0  # a loaded machine needs seconds to start a Python process
VERSION = version("singularity")


def las_settings(tmp_path: Path, las_only: str, **extra: str) -> Any:
    return resolve(las_options(tmp_path, las_only, **extra), environ={})


def start_las(tmp_path: Path, las_only: str = "wire", timeout: float = TIMEOUT) -> Skills:
    return start_skills(plan_skills(las_settings(tmp_path, las_only)), timeout=timeout, grace=5.0)


def call(toolset: McpToolset, name: str, **arguments: Any) -> Outcome:
    return asyncio.run(toolset.call(name, arguments))


@pytest.fixture
def las(tmp_path: Path) -> Iterator[McpToolset]:
    skills = start_las(tmp_path)
    [toolset] = skills.toolsets
    yield toolset
    skills.close()


def received(toolset: McpToolset) -> dict[str, Any]:
    outcome = call(toolset, "wire__received")
    assert outcome.status is Status.SUCCESS, outcome.content
    result: dict[str, Any] = outcome.content["structuredContent"]
    return result


def test_the_handshake_discovery_and_a_call_are_exactly_the_spec_bytes(
    las: McpToolset,
) -> None:
    assert [d.name for d in las.definitions()][:3] == [
        "wire__status",
        "wire__received",
        "wire__garbage",
    ]
    status = call(las, "wire__status")
    assert status.content == {
        "content": [{"type": "text", "text": "ok"}],
        "structuredContent": {"tool": "wire__status"},
        "isError": False,
    }
    seen = received(las)
    assert seen["violations"] == []
    assert seen["lines"] == [
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05",'
        '"capabilities":{},"clientInfo":{"name":"singularity","version":"' + VERSION + '"},'
        '"agentId":"ada-1"}}',
        '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}',
        '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"wire__status",'
        '"arguments":{}}}',
        '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"wire__received",'
        '"arguments":{}}}',
    ]


def test_another_protocol_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(McpError) as caught:
        start_las(tmp_path, "wire,quirk-version")
    assert str(caught.value) == "mcp: Las negotiated an unsupported MCP version"
    assert caught.value.exit_code == 3


def test_a_line_that_is_not_json_fails_the_call_at_once(las: McpToolset) -> None:
    # The deadline is a minute: an error other than the non-JSON one would mean the line
    # was dropped and the reply waited for.
    outcome = call(las, "wire__garbage")
    assert (outcome.status, outcome.error_code, outcome.content) == (
        Status.INDETERMINATE,
        "mcp",
        {"message": "mcp: non-JSON Las stdout: Expecting value: line 1 column 1 (char 0)"},
    )
    assert call(las, "wire__status").status is Status.SUCCESS
    assert received(las)["violations"] == []


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        ("wire__wrong_id", "mcp: Las returned an unexpected response id"),
        ("wire__rpc_error", "mcp: JSON-RPC -32000: boom"),
        ("wire__no_result", "mcp: Las response has no result"),
    ],
)
def test_replies_outside_the_contract(las: McpToolset, tool: str, message: str) -> None:
    outcome = call(las, tool)
    assert (outcome.status, outcome.error_code, outcome.content) == (
        Status.INDETERMINATE,
        "mcp",
        {"message": message},
    )
    assert call(las, "wire__status").status is Status.SUCCESS


def test_blank_lines_and_notifications_are_skipped(las: McpToolset) -> None:
    outcome = call(las, "wire__noise")
    assert outcome.status is Status.SUCCESS
    assert outcome.content["structuredContent"] == {"tool": "wire__noise"}


def test_the_end_of_stdout_and_a_restart(las: McpToolset) -> None:
    warnings: list[str] = []
    las.warn = warnings.append
    outcome = call(las, "wire__exit")
    assert (outcome.status, outcome.content) == (
        Status.INDETERMINATE,
        {"message": "mcp: Las closed stdout"},
    )
    assert call(las, "wire__status").status is Status.SUCCESS
    assert warnings == [
        "mcp: Las stopped during tools/call; it will be restarted for later calls",
        "mcp: Las was restarted",
    ]
    # The new Las saw a whole new handshake, ids from 1, and no notification.
    seen = received(las)
    assert seen["violations"] == []
    assert [json.loads(line)["method"] for line in seen["lines"]] == [
        "initialize",
        "tools/call",
        "tools/call",
    ]


def test_a_late_reply_never_answers_the_next_call(tmp_path: Path) -> None:
    skills = start_las(tmp_path)
    try:
        [toolset] = skills.toolsets
        assert skills.host is not None
        connection = skills.host.connections[0]
        connection.timeout = 1.0
        late = call(toolset, "wire__late", seconds=3)
        assert late.content == {"message": "mcp: Las request deadline exceeded: tools/call"}
        connection.timeout = TIMEOUT
        after = call(toolset, "wire__status")
        assert after.content["structuredContent"] == {"tool": "wire__status"}
        assert received(toolset)["violations"] == []
    finally:
        skills.close()


def test_a_being_cannot_start_on_a_las_of_another_version(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    (tmp_path / "ws").mkdir()
    options = las_options(tmp_path, "echo,quirk-version", required_surfaces="")
    state = ["--state-dir", str(tmp_path / "being"), "--workspace", str(tmp_path / "ws")]
    result = cli("once", *state, *as_flags(options))
    assert (result.code, result.err.splitlines()[-1]) == (
        3,
        "singularity: mcp: Las negotiated an unsupported MCP version (skill servers' stderr is "
        f"in {tmp_path / 'being' / 'logs'})",
    )
