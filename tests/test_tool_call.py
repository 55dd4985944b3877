"""Executing one tool call on a real being (spec §7.2, §10.3, §5.5).

Contract: each call adds an action record (cycle, tool, the outcome's own status, at),
appends the tool message, journals `tool_finished` with the same status and saves the
state, so that a reload from disk equals the being in memory. When the output boundary
replaces the model-visible content, the record and the journal keep the outcome's status.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.domain.records import ToolCall
from singularity.runtime.being import LiveBeing, open_being
from singularity.runtime.loop.tool_call import execute_tool_call
from singularity.store.directory import peek_state
from singularity.tools.catalogue import Catalogue
from singularity.tools.output_boundary import STRICT
from singularity.tools.self_tools import memory_and_self_tools

START = datetime(2026, 2, 3, 4, 5, 6, tzinfo=UTC)
REJECTED = '{"error_code":"sensitive_output_rejected","status":"failed"}'


class StepClock:
    """A clock that moves one millisecond each time it is read."""

    def __init__(self) -> None:
        self.moment = START

    def __call__(self) -> datetime:
        self.moment += timedelta(milliseconds=1)
        return self.moment


@pytest.fixture
def being(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveBeing]:
    monkeypatch.chdir(tmp_path)
    settings = resolve({"state_dir": str(tmp_path / "being")}, environ={})
    live = open_being(settings, clock=StepClock())
    live.save()
    yield live
    live.close()


def _call(call_id: str, name: str, arguments: str) -> ToolCall:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _run(being: LiveBeing, call: ToolCall) -> None:
    catalogue = Catalogue([memory_and_self_tools(being.state, being.clock)], boundary=STRICT)
    asyncio.run(execute_tool_call(being, catalogue, call))


def _journal(being: LiveBeing) -> list[str]:
    return (Path(being.statedir.path) / "activity.jsonl").read_text("utf-8").splitlines()


def _assert_saved(being: LiveBeing) -> None:
    """The being on disk (state.json with state.redo replayed) is the one in memory."""
    on_disk = peek_state(being.statedir.path)
    assert on_disk is not None and on_disk == being.state
    assert on_disk.to_json() == being.state.to_json()


def test_a_successful_call_is_recorded_messaged_journaled_and_saved(being: LiveBeing) -> None:
    being.state.cycle = 3
    _run(being, _call("call_1", "singularity_self_add_rule", '{"rule":" stay solvent "}'))
    state = being.state
    assert state.mind.rules == ["stay solvent"]
    [action] = state.recent_actions
    assert action.model_dump() == {
        "cycle": 3,
        "tool": "singularity_self_add_rule",
        "status": "success",
        "at": action.at,
    }
    assert state.conversation == [
        {
            "role": "tool",
            "content": '{"chat_id":null,"content":{"rule":"stay solvent"},"error_code":null,'
            '"message_id":null,"status":"success"}',
            "tool_call_id": "call_1",
            "name": "singularity_self_add_rule",
        }
    ]
    assert _journal(being)[-1] == (
        f'{{"type":"tool_finished","at":"{action.at}","cycle":3,'
        '"tool":"singularity_self_add_rule","status":"success"}'
    )
    assert state.updated_at > action.at  # saved after the call
    _assert_saved(being)
    saved = peek_state(being.statedir.path)
    assert saved is not None and saved.conversation[-1] == state.conversation[-1]


def test_a_failed_call_is_recorded_as_failed(being: LiveBeing) -> None:
    _run(being, _call("call_x", "no_such_tool", "{}"))
    _run(being, _call("call_y", "singularity_memory_remember", "[]"))
    assert [(a.tool, a.status) for a in being.state.recent_actions] == [
        ("no_such_tool", "failed"),
        ("singularity_memory_remember", "failed"),
    ]
    assert [m["content"] for m in being.state.conversation] == [
        '{"chat_id":null,"content":{"message":"tool is not in the current catalog"},'
        '"error_code":"unknown_tool","message_id":null,"status":"failed"}',
        '{"chat_id":null,"content":{"message":"tool arguments must be a JSON object"},'
        '"error_code":"invalid_arguments","message_id":null,"status":"failed"}',
    ]
    events = [json.loads(line) for line in _journal(being)]
    assert [(e["type"], e["tool"], e["status"]) for e in events] == [
        ("tool_finished", "no_such_tool", "failed"),
        ("tool_finished", "singularity_memory_remember", "failed"),
    ]
    _assert_saved(being)


def test_boundary_replacement_keeps_the_outcomes_own_status(being: LiveBeing) -> None:
    _run(being, _call("c1", "singularity_memory_remember", '{"kind":"n","text":"see /etc/passwd"}'))
    _run(being, _call("c2", "singularity_memory_recall", '{"query":"PASSWD"}'))
    recall_message = being.state.conversation[-1]
    assert recall_message == {
        "role": "tool",
        "content": REJECTED,
        "tool_call_id": "c2",
        "name": "singularity_memory_recall",
    }
    assert being.state.recent_actions[-1].status == "success"
    assert json.loads(_journal(being)[-1])["status"] == "success"
    _assert_saved(being)


def test_calls_accumulate_in_order(being: LiveBeing) -> None:
    for index in range(3):
        arguments = f'{{"learning":"L{index}"}}'
        _run(being, _call(f"c{index}", "singularity_self_add_learning", arguments))
    assert being.state.mind.learnings == ["L0", "L1", "L2"]
    assert [m["tool_call_id"] for m in being.state.conversation] == ["c0", "c1", "c2"]
    ats = [action.at for action in being.state.recent_actions]
    assert ats == sorted(ats) and len(set(ats)) == 3
    assert [json.loads(line)["at"] for line in _journal(being)] == ats
    _assert_saved(being)
