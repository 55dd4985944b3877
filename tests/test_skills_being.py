"""A being that uses skills: boot, cycles, journal, state, and the `tools` and `doctor` commands.

Contract (spec §7.1, §7.7, §8.3, §10, §13, §17; decision 18): skills are started at boot
before the built-ins are registered (a clash is `tool: duplicate tool: <name>`, exit 5;
a server that cannot start or a missing required surface is MCP class, exit 3); every
skill result passes the output boundary before it reaches the model or `state.json`,
while trusted revenue reads the raw result; a server that dies mid-run costs only the
call in flight (indeterminate), is journaled as a `warning` and restarted; shutdown
stops every server. `tools` lists skills then built-ins; `doctor` counts the skills.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from tests.servers import (
    DEMO,
    LAS,
    LEAKED_KEY,
    LEAKED_TOKEN,
    as_flags,
    las_options,
    stdio,
    write_skills,
)
from tests.support.commands import SINGULARITY
from tests.support.loop_http import Result, boot, cli_args, journal, run, state_of

TIMEOUT = "180"  # a loaded machine needs seconds to start an MCP server
REJECTED = '{"error_code":"sensitive_output_rejected","status":"failed"}'


def demo_skills(root: Path) -> Path:
    return write_skills(root / "skills.json", {"demo": stdio(DEMO), "finance": stdio(DEMO)})


def tool_messages(root: Path) -> dict[str, dict[str, Any] | str]:
    """Each tool message of the saved conversation by call id: its parsed content, or raw."""
    found: dict[str, dict[str, Any] | str] = {}
    for message in state_of(root).conversation:
        if message["role"] == "tool":
            content = message["content"]
            found[message["tool_call_id"]] = content if content == REJECTED else json.loads(content)
    return found


def test_a_being_uses_skills_through_the_boundary_and_survives_a_dead_server(
    tmp_path: Path,
) -> None:
    calls = [
        Call("demo__echo", '{"text": "hello"}', "echo"),
        Call("demo__leak_key", "{}", "key"),
        Call("demo__leak_pem", "{}", "pem"),
        Call("finance__sale", '{"amount": "1.25"}', "sale"),
        Call("demo__fail", '{"reason": "sold out"}', "fail"),
        Call("demo__die", "{}", "die"),
        Call("demo__whoami", "{}", "whoami"),
    ]
    script = [Turn.tool_calls(*calls), Turn.text("done")]
    with ScriptedServer(script) as server:

        async def live() -> int:
            runtime = boot(
                tmp_path, server, skills_file=str(demo_skills(tmp_path)), mcp_timeout_secs=TIMEOUT
            )
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()
            return 0

        run(live())
        sent_tools = [tool["function"]["name"] for tool in server.completions[0].json["tools"]]
    assert sent_tools[:2] == ["demo__echo", "demo__add"]
    assert sent_tools.index("finance__sale") < sent_tools.index("singularity_memory_remember")

    messages = tool_messages(tmp_path)
    assert messages["echo"] == {
        "chat_id": None,
        "content": {
            "content": [{"type": "text", "text": "hello"}],
            "structuredContent": {"result": "hello"},
            "isError": False,
        },
        "error_code": None,
        "message_id": None,
        "status": "success",
    }
    # The default boundary (redact): the credential and the key block are replaced.
    assert messages["key"]["content"]["structuredContent"] == {  # type: ignore[index]
        "api_token": "<redacted: secret-like key>"
    }
    assert messages["pem"]["content"]["content"] == [  # type: ignore[index]
        {"type": "text", "text": "<redacted: private key>"}
    ]
    assert messages["pem"]["redacted"] == {  # type: ignore[index]
        "count": 2,
        "reasons": {"private key block": 2},
    }
    assert messages["fail"]["status"] == "failed"  # type: ignore[index]
    assert messages["fail"]["error_code"] == "remote_tool"  # type: ignore[index]
    assert messages["die"] == {
        "chat_id": None,
        "content": {"message": "mcp: skill server demo closed stdout during tools/call"},
        "error_code": "mcp",
        "message_id": None,
        "status": "indeterminate",
    }
    assert messages["whoami"]["status"] == "success"  # type: ignore[index]

    events = journal(tmp_path)
    finished = [(e["tool"], e["status"]) for e in events if e["type"] == "tool_finished"]
    assert finished == [
        ("demo__echo", "success"),
        ("demo__leak_key", "success"),  # the journal keeps the outcome's own status
        ("demo__leak_pem", "success"),
        ("finance__sale", "success"),
        ("demo__fail", "failed"),
        ("demo__die", "indeterminate"),
        ("demo__whoami", "success"),
    ]
    credits = [e for e in events if e["type"] == "revenue_credited"]
    assert [(c["amount"], c["source"]) for c in credits] == [("1.25", "finance__sale")]
    assert state_of(tmp_path).budget.earned == Decimal("1.25")
    warnings = [e["message"] for e in events if e["type"] == "warning"]
    assert warnings == [
        "mcp: skill server demo stopped during tools/call; it will be restarted for later calls",
        "mcp: skill server demo was restarted",
    ]
    assert [e["type"] for e in events][-1] == "stopped"
    state = state_of(tmp_path)
    assert [a.tool for a in state.recent_actions] == [call.name for call in calls]
    for name in os.listdir(tmp_path / "being"):
        path = tmp_path / "being" / name
        if path.is_file():
            data = path.read_bytes()
            assert LEAKED_TOKEN.encode() not in data, name
            assert LEAKED_KEY.encode() not in data, name
    pid = messages["whoami"]["content"]["structuredContent"]["pid"]  # type: ignore[index]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # shutdown stopped the restarted server


def test_a_skill_clashing_with_a_built_in_fails_the_boot(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    las = as_flags(las_options(tmp_path, "clash", mcp_timeout_secs=TIMEOUT))
    with ScriptedServer([]) as server:
        result = cli("once", *cli_args(tmp_path, server, *las))
        assert server.completions == []
    assert (result.code, result.out) == (5, "")
    assert result.err.endswith("singularity: tool: duplicate tool: singularity_memory_remember\n")


@pytest.mark.parametrize(
    ("servers", "flags", "code", "message"),
    [
        (None, ["--skills", "missing.json"], 2, "configuration: skills file missing.json: "),
        ({"a__b": {"command": "x"}}, [], 2, "server 'a__b': a server name must be"),
        (
            {"ghost": {"command": "/nonexistent/ghost-mcp"}},
            [],
            3,
            "mcp: cannot start skill server ghost: No such file or directory (os error 2)",
        ),
        ({}, ["--required-surfaces", "finance"], 3, "mcp: required skill surface unavailable"),
    ],
)
def test_boot_failures_of_skills(
    tmp_path: Path,
    cli: Callable[..., Result],
    servers: dict[str, Any] | None,
    flags: list[str],
    code: int,
    message: str,
) -> None:
    if servers is not None:
        flags = ["--skills", str(write_skills(tmp_path / "skills.json", servers)), *flags]
    with ScriptedServer([]) as server:
        result = cli("once", *cli_args(tmp_path, server, *flags))
    assert (result.code, result.out) == (code, "")
    assert message in result.err


def test_a_being_uses_a_skill_across_cycles_as_a_subprocess(tmp_path: Path) -> None:
    script = [
        Turn.tool_call("demo__echo", {"text": "first"}, call_id="c1"),
        Turn.text("one"),
        Turn.tool_call("demo__add", {"a": 20, "b": 22}, call_id="c2"),
        Turn.text("two"),
        Turn.tool_call("demo__echo", {"text": "third"}, call_id="c3"),
        Turn.text("three"),
    ]
    skills = write_skills(tmp_path / "skills.json", {"demo": stdio(DEMO)})
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SINGULARITY_", "BRAMA_", "LAS_", "MOST_", "WISENT_"))
    }
    with ScriptedServer(script) as server:
        args = cli_args(tmp_path, server, "--skills", str(skills), "--mcp-timeout-secs", TIMEOUT)
        completed = subprocess.run(
            [str(SINGULARITY), "run", "--max-cycles", "3", "--log-format", "json", *args],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    assert completed.returncode == 0, completed.stderr
    events = journal(tmp_path)
    assert [
        (e["cycle"], e["tool"], e["status"]) for e in events if e["type"] == "tool_finished"
    ] == [
        (1, "demo__echo", "success"),
        (2, "demo__add", "success"),
        (3, "demo__echo", "success"),
    ]
    messages = tool_messages(tmp_path)
    assert messages["c1"]["content"]["structuredContent"] == {"result": "first"}  # type: ignore[index]
    assert messages["c2"]["content"]["structuredContent"] == {"result": 42}  # type: ignore[index]
    assert messages["c3"]["content"]["structuredContent"] == {"result": "third"}  # type: ignore[index]
    state = state_of(tmp_path)
    assert [(a.cycle, a.tool, a.status) for a in state.recent_actions] == [
        (1, "demo__echo", "success"),
        (2, "demo__add", "success"),
        (3, "demo__echo", "success"),
    ]
    assert state.status == "stopped"


def test_tools_lists_skills_then_built_ins(tmp_path: Path, cli: Callable[..., Result]) -> None:
    skills = write_skills(tmp_path / "skills.json", {"demo": stdio(DEMO)})
    result = cli("tools", "--skills", str(skills), "--format", "table")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[:4] == [
        "demo__echo\tEcho a text back",
        "demo__add\tAdd two integers",
        "demo__ping\t",
        "demo__fail\tFail with a reason",
    ]
    assert lines[10] == "singularity_memory_remember\tPersist a memory owned by this digital being"
    assert len(lines) == 10 + 24  # the built-ins, the sanctum's and the journal's tools
    listed = cli("tools", "--skills", str(skills))
    assert listed.code == 0, listed.err
    definitions = json.loads(listed.out)
    assert definitions[0]["name"] == "demo__echo"
    assert definitions[0]["parameters"]["required"] == ["text"]


def test_tools_lists_exactly_what_a_booted_being_is_offered(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    skills = write_skills(tmp_path / "skills.json", {"demo": stdio(DEMO)})
    token = tmp_path / "most.token"
    token.write_text("most-token")
    token.chmod(0o600)
    listed = cli("tools", "--skills", str(skills), "--most-token-file", str(token))
    assert listed.code == 0, listed.err
    with ScriptedServer([]) as server:

        async def offered() -> list[dict[str, Any]]:
            runtime = boot(
                tmp_path,
                server,
                skills_file=str(skills),
                most_token_file=str(token),
                mcp_timeout_secs=TIMEOUT,
            )
            try:
                return [
                    {"name": d.name, "description": d.description, "parameters": d.parameters}
                    for d in runtime.life.catalogue.definitions
                ]
            finally:
                await runtime.shutdown()

        booted = run(offered())
    assert json.loads(listed.out) == booted
    names = [tool["name"] for tool in booted]
    assert len(names) == 10 + 3 + 24
    for name in (
        "most_send_message",
        "singularity_sanctum_wake",
        "singularity_journal_write",
        "singularity_reasonlog_append",
    ):
        assert name in names


def test_doctor_starts_every_server_and_counts_the_tools(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    skills = demo_skills(tmp_path)
    with ScriptedServer([]) as server:
        result = cli(
            "doctor",
            "--brama-url",
            server.url,
            "--brama-model",
            "scripted-model",
            "--skills",
            str(skills),
            "--required-surfaces",
            "demo,finance",
        )
    assert result.code == 0, result.err
    assert json.loads(result.out) == {
        "brama_model": "scripted-model",
        "las_tools": 20,
        "most": None,
        "ok": True,
    }
    assert not (tmp_path / ".singularity").exists()  # no being state written


def test_tools_starts_las_without_checking_its_release_files(cli: Callable[..., Result]) -> None:
    las = ["--las-command", sys.executable, "--las-only", "echo,weles"]
    result = cli("tools", *las, "--las-entrypoint", str(LAS), "--format", "table")
    assert result.code == 0, result.err
    assert result.out.splitlines()[:4] == [
        "echo__status\tLas echo__status",
        "echo__environment\tLas echo__environment",
        "echo__initialize\tLas echo__initialize",
        "weles__status\tLas weles__status",
    ]
    missing = cli("tools", *las, "--las-entrypoint", "nowhere.mjs")
    assert (missing.code, missing.out) == (2, "")
    assert missing.err.endswith(
        "singularity: configuration: LAS entrypoint not found: nowhere.mjs\n"
    )
