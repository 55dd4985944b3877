"""Skills against real MCP servers written with the SDK (tests/servers), over stdio and HTTP.

Contract (spec §10.1, §13, decision 18): a server's tools are discovered at start and
named `<server>__<tool>` (Las: as listed), with `description` default "" and the
`inputSchema` or `{"type":"object","properties":{}}`; a result is the whole MCP result,
`isError: true` making it a failed `remote_tool`; a transport failure or a missed
deadline is an indeterminate `mcp` outcome, never replayed; a late reply never answers
the next call; a server that dies is restarted for later calls with a bounded back-off;
a stdio server's environment is exactly the scrubbed set; shutdown closes stdin, waits
the grace period, then kills.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.errors import CatalogueError, McpError
from singularity.runtime.inspect.catalogue import builtin_definitions
from singularity.skills import Skills, plan_skills, start_skills
from singularity.skills.environment import SAFE_PATH
from singularity.skills.toolset import McpToolset
from singularity.tools.base import FunctionTool, FunctionToolset, Outcome, Status
from singularity.tools.catalogue import Catalogue, tool_message
from singularity.tools.output_boundary import STRICT
from tests.servers import BARE, DEMO, http_demo, las_options, stdio, write_skills
from tests.support.polling import wait_for

TIMEOUT = 180.0  # a loaded machine needs seconds to start a Python MCP server
DEMO_TOOLS = [
    "echo",
    "add",
    "ping",
    "fail",
    "die",
    "whoami",
    "environment",
    "leak_key",
    "leak_pem",
    "sale",
]


def start(tmp_path: Path, servers: dict[str, Any], **options: Any) -> Skills:
    settings = resolve(
        {"skills_file": str(write_skills(tmp_path / "skills.json", servers))}, environ={}
    )
    options = {"timeout": TIMEOUT, "grace": 5.0, **options}
    return start_skills(plan_skills(settings), **options)


def call(toolset: McpToolset, name: str, **arguments: Any) -> Outcome:
    return asyncio.run(toolset.call(name, arguments))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Skills]:
    """One demo server for the module, started with canaries in the runtime's environment."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SKILLS_TEST_CANARY", "canary-must-not-reach-the-server")
        patch.setenv("SKILLS_TEST_PASS", "passed-by-name")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "canary-aws")
        env = {"NAMED": "plain", "FROM_RUNTIME": "${SKILLS_TEST_PASS}"}
        skills = start(tmp_path_factory.mktemp("demo"), {"demo": stdio(DEMO, env=env)})
    yield skills
    skills.close()


@pytest.fixture
def toolset(demo: Skills) -> Iterator[McpToolset]:
    [toolset] = demo.toolsets
    notices: list[str] = []
    toolset.warn = notices.append
    yield toolset


def notices_of(toolset: McpToolset) -> list[str]:
    return toolset.warn.__self__  # type: ignore[attr-defined,no-any-return]


# --- discovery --------------------------------------------------------------------------


def test_discovery_names_each_tool_after_its_server(demo: Skills) -> None:
    definitions = {d.name: d for d in demo.toolsets[0].definitions()}
    assert list(definitions) == [f"demo__{name}" for name in DEMO_TOOLS]
    assert definitions["demo__echo"].description == "Echo a text back"
    assert definitions["demo__ping"].description == ""  # the default
    assert definitions["demo__echo"].parameters == {
        "type": "object",
        "properties": {"text": {"title": "Text", "type": "string"}},
        "required": ["text"],
        "title": "echoArguments",
    }
    # A tool without arguments keeps the object schema its server sent.
    assert definitions["demo__ping"].parameters == {
        "type": "object",
        "properties": {},
        "title": "pingArguments",
    }
    builtins = FunctionToolset([FunctionTool(d, None) for d in builtin_definitions()])  # type: ignore[arg-type]
    catalogue = Catalogue([*demo.toolsets, builtins], boundary=STRICT)
    assert [d.name for d in catalogue.definitions][: len(DEMO_TOOLS) + 1] == [
        *definitions,
        "singularity_memory_remember",
    ]


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Skills]:
    """The low-level server, listing a tool without a schema and `echo` twice."""
    skills = start(tmp_path_factory.mktemp("bare"), {"bare": stdio(BARE, "--twice")})
    yield skills
    skills.close()


def test_a_listed_tool_without_input_schema_gets_the_default_and_a_duplicate_fails(
    bare: Skills,
) -> None:
    [toolset] = bare.toolsets
    assert [(d.name, d.parameters) for d in toolset.definitions()] == [
        ("bare__noschema", {"type": "object", "properties": {}}),
        ("bare__echo", {"type": "object"}),
        ("bare__slow", {"type": "object"}),
        ("bare__echo", {"type": "object"}),
    ]
    with pytest.raises(CatalogueError) as caught:
        Catalogue(bare.toolsets, boundary=STRICT)
    assert (str(caught.value), caught.value.exit_code) == ("tool: duplicate tool: bare__echo", 5)
    outcome = call(toolset, "bare__noschema", x=1)
    assert outcome.status is Status.SUCCESS
    assert outcome.content["content"][0]["text"] == "noschema called with [('x', 1)]"


def test_a_slow_tool_misses_the_deadline_and_its_late_reply_is_dropped(
    bare: Skills, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp.shared.jsonrpc_dispatcher")
    assert bare.host is not None
    connection = bare.host.connections[0]
    [toolset] = bare.toolsets
    notices: list[str] = []
    toolset.warn = notices.append
    connection.timeout = 1.0
    try:
        outcome = call(toolset, "bare__slow", seconds=2.5)
        assert (outcome.status, outcome.error_code, outcome.content) == (
            Status.INDETERMINATE,
            "mcp",
            {"message": "mcp: skill server bare request deadline exceeded: tools/call"},
        )
        # The server ignores the cancel: its reply arrives later, for nobody.
        wait_for(
            lambda: any("late request id" in r.getMessage() for r in caplog.records),
            "the late reply to be dropped",
        )
        after = call(toolset, "bare__echo", text="next")
        assert after.status is Status.SUCCESS
        assert after.content["content"][0]["text"] == "echo called with [('text', 'next')]"
    finally:
        connection.timeout = TIMEOUT
    assert notices == []  # a missed deadline does not restart anything


# --- calls ------------------------------------------------------------------------------


def test_a_call_returns_the_whole_mcp_result(toolset: McpToolset) -> None:
    outcome = call(toolset, "demo__echo", text="hello")
    assert (outcome.status, outcome.error_code) == (Status.SUCCESS, None)
    assert outcome.content == {
        "content": [{"type": "text", "text": "hello"}],
        "structuredContent": {"result": "hello"},
        "isError": False,
    }
    message = tool_message("call_1", "demo__echo", outcome, STRICT)
    assert message.rejection is None
    assert json.loads(message.message["content"]) == {
        "chat_id": None,
        "content": outcome.content,
        "error_code": None,
        "message_id": None,
        "status": "success",
    }
    assert call(toolset, "demo__add", a=2, b=40).content["structuredContent"] == {"result": 42}
    assert call(toolset, "demo__ping").content["content"][0]["text"] == "pong"


def test_is_error_is_a_failed_remote_tool_outcome(toolset: McpToolset) -> None:
    outcome = call(toolset, "demo__fail", reason="out of stock")
    assert (outcome.status, outcome.error_code) == (Status.FAILED, "remote_tool")
    assert outcome.content == {
        "content": [{"type": "text", "text": "Error executing tool fail: out of stock"}],
        "isError": True,
    }


def test_a_server_that_exits_mid_call_is_restarted_for_later_calls(toolset: McpToolset) -> None:
    first = call(toolset, "demo__whoami").content["structuredContent"]["pid"]
    outcome = call(toolset, "demo__die", code=3)
    assert (outcome.status, outcome.error_code, outcome.content) == (
        Status.INDETERMINATE,
        "mcp",
        {"message": "mcp: skill server demo closed stdout during tools/call"},
    )
    assert notices_of(toolset) == [
        "mcp: skill server demo stopped during tools/call; it will be restarted for later calls"
    ]
    later = call(toolset, "demo__whoami")
    assert later.status is Status.SUCCESS
    assert later.content["structuredContent"]["pid"] != first
    assert later.content["structuredContent"]["calls"] == 1  # a fresh process
    assert notices_of(toolset)[1:] == ["mcp: skill server demo was restarted"]
    with pytest.raises(ProcessLookupError):
        os.kill(first, 0)  # the dead server was reaped


def test_a_server_that_died_between_calls_is_restarted_by_the_next_call(
    demo: Skills, toolset: McpToolset
) -> None:
    pid = call(toolset, "demo__whoami").content["structuredContent"]["pid"]
    os.kill(pid, signal.SIGKILL)
    [connection] = demo.host.connections
    wait_for(lambda: not connection.alive, "the transport to see its stdout end")
    later = call(toolset, "demo__whoami")
    assert later.status is Status.SUCCESS
    assert later.content["structuredContent"]["pid"] != pid
    assert notices_of(toolset) == [
        "mcp: skill server demo had stopped; restarting it",
        "mcp: skill server demo was restarted",
    ]


def test_a_server_that_cannot_restart_backs_off(tmp_path: Path) -> None:
    marker = tmp_path / "broken"
    wrapper = tmp_path / "server.sh"
    wrapper.write_text(
        f'#!/bin/sh\n[ -e "{marker}" ] && exit 1\nexec "{sys.executable}" "{DEMO}"\n'
    )
    wrapper.chmod(0o755)
    skills = start(tmp_path, {"flaky": {"command": str(wrapper)}})
    try:
        [toolset] = skills.toolsets
        notices: list[str] = []
        toolset.warn = notices.append
        marker.touch()
        assert call(toolset, "flaky__die").status is Status.INDETERMINATE
        failed = call(toolset, "flaky__echo", text="x")
        assert failed.status is Status.INDETERMINATE
        assert failed.content["message"].startswith(
            "mcp: skill server flaky is down; the call was not sent ("
        )
        waiting = call(toolset, "flaky__echo", text="x")
        assert waiting.content == {
            "message": "mcp: skill server flaky is down; the call was not sent (restart in 1s)"
        }
        assert notices == [
            "mcp: skill server flaky stopped during tools/call; it will be restarted for later calls",
            "mcp: skill server flaky failed to restart: skill server flaky closed stdout during "
            "initialize; next attempt in 1s",
        ]
        marker.unlink()
        # Calls are refused until the back-off has passed, then one restarts the server.
        wait_for(
            lambda: call(toolset, "flaky__echo", text="back").status is Status.SUCCESS,
            "the server to be restarted after its back-off",
        )
        assert notices[-1] == "mcp: skill server flaky was restarted"
    finally:
        skills.close()


def test_garbage_on_stdout_is_dropped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="singularity.skills")
    skills = start(tmp_path, {"noisy": stdio(DEMO, "--garbage")})
    try:
        [toolset] = skills.toolsets
        assert call(toolset, "noisy__echo", text="clean").content["structuredContent"] == {
            "result": "clean"
        }
    finally:
        skills.close()
    warnings = [r.getMessage() for r in caplog.records if "not JSON-RPC" in r.getMessage()]
    assert warnings == [
        "skill server noisy wrote a line that is not JSON-RPC on stdout; ignored: "
        "b'Starting demo server...'",
        "skill server noisy wrote a line that is not JSON-RPC on stdout; ignored: "
        "b'[not json either'",
    ]


# --- environment -------------------------------------------------------------------------


def test_a_stdio_server_gets_exactly_the_scrubbed_environment(toolset: McpToolset) -> None:
    environment = call(toolset, "demo__environment").content["structuredContent"]
    assert environment == {
        "PATH": SAFE_PATH,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "NAMED": "plain",
        "FROM_RUNTIME": "passed-by-name",
    }
    assert "canary" not in json.dumps(environment)


# --- streamable HTTP -----------------------------------------------------------------------


def test_a_server_over_streamable_http(tmp_path: Path) -> None:
    with http_demo() as url:
        skills = start(tmp_path, {"web": {"url": url, "headers": {"X-Test": "1"}}})
        try:
            [toolset] = skills.toolsets
            assert [d.name for d in toolset.definitions()] == [f"web__{n}" for n in DEMO_TOOLS]
            assert call(toolset, "web__echo", text="over http").content == {
                "content": [{"type": "text", "text": "over http"}],
                "structuredContent": {"result": "over http"},
                "isError": False,
            }
            failed = call(toolset, "web__fail", reason="no")
            assert (failed.status, failed.error_code) == (Status.FAILED, "remote_tool")
        finally:
            skills.close()


# --- Las -----------------------------------------------------------------------------------


def las_settings(tmp_path: Path, las_only: str, **extra: str) -> Any:
    return resolve(las_options(tmp_path, las_only, **extra), environ={})


def test_las_tools_keep_their_names_and_las_gets_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKARBIEC_CAP_POLICY", "/etc/policy")
    monkeypatch.setenv("SKARBIEC_MCP_AGENT_ID", "ambient")
    monkeypatch.setenv("SKARBIEC_OTHER", "canary-unlisted")
    monkeypatch.setenv("LAS_CANARY", "canary-las")
    settings = las_settings(tmp_path, "echo,finance,skarbiec")
    skills = start_skills(plan_skills(settings), timeout=TIMEOUT, grace=5.0)
    try:
        [toolset] = skills.toolsets
        assert [d.name for d in toolset.definitions()] == [
            "echo__status",
            "echo__environment",
            "echo__initialize",
            "finance__status",
            "finance__finance_propose",
            "skarbiec__status",
        ]
        environment = call(toolset, "echo__environment").content["structuredContent"]
        assert environment == {
            "PATH": SAFE_PATH,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "LAS_ONLY": "echo,finance,skarbiec",
            "LAS_RELEASE_MANIFEST_FILE": str(tmp_path / "manifest"),
            "LAS_RELEASE_MANIFEST_SIGNATURE_FILE": str(tmp_path / "signature"),
            "LAS_RELEASE_TRUST_STORE_FILE": str(tmp_path / "trust"),
            "LAS_RELEASE_WATERMARK_FILE": str(tmp_path / "watermark"),
            "SKARBIEC_CAP_POLICY": "/etc/policy",
            "SKARBIEC_MCP_AGENT_ID": "ada-1",
        }
        initialize = call(toolset, "echo__initialize").content["structuredContent"]
        assert initialize["agentId"] == "ada-1"
        assert initialize["clientInfo"]["name"] == "singularity"
    finally:
        skills.close()


def test_a_missing_required_las_surface_fails_the_start(tmp_path: Path) -> None:
    settings = las_settings(tmp_path, "echo")
    with pytest.raises(McpError) as caught:
        start_skills(
            plan_skills(settings), timeout=TIMEOUT, grace=5.0, required_surfaces=["echo", "weles"]
        )
    assert (str(caught.value), caught.value.exit_code) == (
        "mcp: required Las surface unavailable: weles",
        3,
    )


# --- start and stop -------------------------------------------------------------------------


def test_a_server_that_cannot_start(tmp_path: Path) -> None:
    with pytest.raises(McpError) as caught:
        start(tmp_path, {"ghost": {"command": str(tmp_path / "missing")}})
    assert str(caught.value) == (
        "mcp: cannot start skill server ghost: No such file or directory (os error 2)"
    )
    with pytest.raises(McpError) as caught:
        start(tmp_path, {"quitter": {"command": sys.executable, "args": ["-c", "pass"]}})
    assert str(caught.value) == "mcp: skill server quitter closed stdout during initialize"


def test_shutdown_waits_the_grace_period_then_kills(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    skills = start(tmp_path, {"sticky": stdio(DEMO, "--linger")}, grace=0.5)
    [toolset] = skills.toolsets
    pid = call(toolset, "sticky__whoami").content["structuredContent"]["pid"]
    skills.close()  # the server ignores stdin's end: the grace passes, then it is killed
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert any("did not exit within 0.5s" in r.getMessage() for r in caplog.records)
    closed = call(toolset, "sticky__whoami")
    assert (closed.status, closed.content) == (
        Status.INDETERMINATE,
        {"message": "mcp: skill server sticky is shut down"},
    )
