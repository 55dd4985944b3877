"""A kill between two tool calls of one model answer leaves no call unanswered.

Contract: a server that holds to OpenAI's rule (every call of an assistant message answered
by the tool messages right after it) refuses a request that breaks it with HTTP 400, a
permanent error. Boot answers every call a kill left open, as an immediate exit does: the
newest answer's first open call `interrupted` (its effect is unknown, recorded and
journaled `indeterminate`), the later ones `cancelled`; an open call of an older answer
`interrupted` where it stands. The being then lives on against the strict server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from singularity.runtime.inspect.verify import verify_state_dir
from singularity.runtime.loop.lifecycle import Runtime
from singularity.runtime.loop.tool_call import CANCELLED_CONTENT, INTERRUPTED_CONTENT
from singularity.storage.statedir import StateDir
from singularity.testing.scripted_server import (
    Call,
    ScriptedServer,
    Turn,
    tool_message_violation,
)
from tests.servers import HERE, stdio, write_skills
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.loop_http import cli_args, dangling_calls, journal, run, settings, state_of
from tests.support.polling import wait_for

HOSTILE = HERE / "hostile.py"
ADD_RULE = "singularity_self_add_rule"
WAIT_SECS = 180.0


def _environment() -> dict[str, str]:
    return clean_environment()


def _in_flight(path: Path, process: subprocess.Popen[bytes]) -> bool:
    assert process.poll() is None, "the being exited before the call was in flight"
    return path.exists() and bool(path.read_text())


def test_the_strict_server_refuses_unanswered_and_unasked_tool_messages() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
    answer = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    user = {"role": "user", "content": "hi"}
    assert tool_message_violation([user, assistant, answer, user]) is None
    missing = tool_message_violation([user, assistant, user, answer])
    assert missing is not None and missing[0].endswith("did not have response messages: c1")
    stray = tool_message_violation([user, answer])
    assert stray == (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'.",
        "messages.[1].role",
    )
    with ScriptedServer([Turn.text("served")], openai_strict=True) as server:
        import httpx

        body = {"model": "m", "messages": [user, assistant, user]}
        refused = httpx.post(server.url + "v1/chat/completions", json=body, timeout=WAIT_SECS)
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "invalid_request_error"
        assert server.remaining == 1, "a refused request consumes no turn"


def test_a_kill_between_two_tool_calls_is_answered_at_the_next_boot(tmp_path: Path) -> None:
    marker = tmp_path / "in-flight"
    skills = write_skills(tmp_path / "skills.json", {"hostile": stdio(HOSTILE)})
    answer = Turn.tool_calls(
        Call(ADD_RULE, json.dumps({"rule": "first"}), "c1"),
        Call("hostile__block", json.dumps({"marker": str(marker)}), "c2"),
        Call(ADD_RULE, json.dumps({"rule": "third"}), "c3"),
    )
    with ScriptedServer([answer, Turn.text("alive again")], openai_strict=True) as server:
        args = cli_args(tmp_path, server, "--skills", str(skills), "--mcp-timeout-secs", "600")
        process = subprocess.Popen(
            [str(SINGULARITY), "run", *args],
            cwd=tmp_path,
            env=_environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: _in_flight(marker, process), "the blocking call", timeout=WAIT_SECS)
        finally:
            process.kill()
            process.wait()
            os.kill(int(marker.read_text()), signal.SIGKILL)  # the skill server hangs on
        assert dangling_calls(state_of(tmp_path).conversation) == ["c2", "c3"]
        resumed = subprocess.run(
            [str(SINGULARITY), "once", "--resume", *cli_args(tmp_path, server)],
            cwd=tmp_path,
            env=_environment(),
            capture_output=True,
            text=True,
        )
        sent = server.completions[-1].json["messages"]
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["final_content"] == "alive again"
    answers = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    assert answers["c2"] == INTERRUPTED_CONTENT
    assert answers["c3"] == CANCELLED_CONTENT
    state = state_of(tmp_path)
    assert dangling_calls(state.conversation) == []
    assert state.mind.rules == ["first"]
    assert [(a.tool, a.status) for a in state.recent_actions] == [
        (ADD_RULE, "success"),
        ("hostile__block", "indeterminate"),
    ]
    finished = [e for e in journal(tmp_path) if e["type"] == "tool_finished"]
    assert [(e["tool"], e["status"]) for e in finished] == [
        (ADD_RULE, "success"),
        ("hostile__block", "indeterminate"),
    ]
    assert verify_state_dir(str(tmp_path / "being")) == []


def test_open_calls_of_older_answers_are_answered_where_they_stand(tmp_path: Path) -> None:
    """A state an earlier version left: a dangling call in the middle of the window."""
    with ScriptedServer([Turn.text("first life")]) as server:
        runtime_settings = settings(tmp_path, server)

        async def first_life() -> None:
            runtime = Runtime.boot(runtime_settings)
            await runtime.once()
            await runtime.shutdown()

        run(first_life())
    state_dir = tmp_path / "being"
    state = state_of(tmp_path)
    call = {"id": "old", "type": "function", "function": {"name": ADD_RULE, "arguments": "{}"}}
    framing = state.conversation[0]
    state.conversation[1:1] = [
        {"role": "assistant", "content": "", "tool_calls": [call]},  # type: ignore[typeddict-item]
    ]
    state.conversation.append(dict(framing))  # type: ignore[arg-type]
    with StateDir.open(str(state_dir)) as opened:
        opened.save(state)
    with ScriptedServer([Turn.text("second life")], openai_strict=True) as server:
        resumed_settings = settings(tmp_path, server, resume="true")

        async def second_life() -> str | None:
            runtime = Runtime.boot(resumed_settings)
            report = await runtime.once()
            await runtime.shutdown()
            return report.final_content

        assert run(second_life()) == "second life"
        sent = server.completions[-1].json["messages"]
    roles = [m["role"] for m in sent]
    at = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert roles[at + 1] == "tool" and sent[at + 1]["tool_call_id"] == "old"
    assert sent[at + 1]["content"] == INTERRUPTED_CONTENT
    assert dangling_calls(state_of(tmp_path).conversation) == []
