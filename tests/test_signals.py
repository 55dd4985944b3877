"""Stopping a living being with signals (decision 9, spec §7.6-§7.7).

Contract: SIGTERM and SIGINT make `singularity run` stop gracefully at the next safe
point (after the model call or tool call in flight; calls the model asked for that did
not run are answered `cancelled`), through shutdown: final status `stopped`, `stopped`
journaled, exit 0. A signal while sleeping between cycles stops at once. A second signal
saves and exits at once, with 0 as well: the state is one `verify` accepts, its final
status and `stopped` are written, no tool call is left unanswered, and the reservation of
a model call in flight is paid (its outcome is unknown). The runs are real subprocesses
against the scripted gateway served from this process.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.domain.state import AgentState
from singularity.runtime.being import LiveBeing
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.runtime.loop.cycle import live_cycle
from singularity.runtime.loop.lifecycle import IN_FLIGHT_CHARGED, Runtime
from singularity.runtime.loop.tool_call import CANCELLED_CONTENT, INTERRUPTED_CONTENT
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from singularity.tools.base import FunctionTool, FunctionToolset, Outcome, ToolDefinition, Toolset
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.loop_http import boot, cli_args, dangling_calls, journal, state_of, types

ADD_RULE = "singularity_self_add_rule"
WAIT_SECS = 180.0


class Being:
    """A `singularity run` subprocess."""

    def __init__(self, root: Path, server: ScriptedServer, *extra: str) -> None:
        env = clean_environment()
        self.log = (root / "stderr.txt").open("wb")
        self.process = subprocess.Popen(
            [str(SINGULARITY), "run", *cli_args(root, server, *extra), "--log-format", "json"],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        self.root = root

    def send(self, number: int) -> None:
        self.process.send_signal(number)

    def wait(self, timeout: float = WAIT_SECS) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self.log.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def stderr(self) -> str:
        return (self.root / "stderr.txt").read_text("utf-8", errors="replace")


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Being]]:
    beings: list[Being] = []

    def start(server: ScriptedServer, *extra: str) -> Being:
        being = Being(tmp_path, server, *extra)
        beings.append(being)
        return being

    yield start
    for being in beings:
        being.kill()


def wait_until(condition: Callable[[], bool], what: str, being: Being) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not condition():
        if being.process.poll() is not None:
            pytest.fail(
                f"the being exited ({being.process.returncode}) before {what}:\n" + being.stderr()
            )
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n" + being.stderr())
        time.sleep(0.02)


def saved_state(root: Path) -> AgentState | None:
    try:
        return state_of(root)
    except (OSError, ValueError):
        return None


def assert_graceful_stop(root: Path, code: int) -> AgentState:
    assert code == 0
    state = state_of(root)
    assert state.status == "stopped"
    events = journal(root)
    assert events[-1] == {
        "type": "stopped",
        "at": events[-1]["at"],
        "cycle": state.cycle,
        "status": "stopped",
    }
    assert dangling_calls(state.conversation) == []
    return state


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_after_the_model_call_in_flight(
    tmp_path: Path, spawn: Callable[..., Being], number: int
) -> None:
    calls = [Call(ADD_RULE, '{"rule":"never added"}', "call_x"), Call(ADD_RULE, "{}", "call_y")]
    with ScriptedServer([Turn.tool_calls(*calls).delayed(2.0)]) as server:
        being = spawn(server, "--output-price", "5")
        wait_until(lambda: len(server.completions) == 1, "the model call", being)
        being.send(number)
        code = being.wait()
        assert len(server.completions) == 1
    state = assert_graceful_stop(tmp_path, code)
    assert state.cycle == 1
    assert state.mind.rules == []
    assert [m.get("tool_call_id") for m in state.conversation[-2:]] == ["call_x", "call_y"]
    assert all(m["content"] == CANCELLED_CONTENT for m in state.conversation[-2:])
    kinds = types(journal(tmp_path))
    # The call in flight finished and was paid for; the tools it asked for never ran.
    assert kinds[-5:] == [
        "cycle_started",
        "cost_reserved",
        "model_completed",
        "cost_debited",
        "stopped",
    ]
    assert "tool_finished" not in kinds


def test_a_signal_while_sleeping_stops_at_once(tmp_path: Path, spawn: Callable[..., Being]) -> None:
    with ScriptedServer([Turn.text("resting")]) as server:
        being = spawn(server, "--cycle-interval-secs", "600")

        def rested() -> bool:
            state = saved_state(tmp_path)
            return state is not None and state.conversation[-1:] == [
                {"role": "assistant", "content": "resting"}
            ]

        wait_until(rested, "the end of the first cycle", being)
        being.send(signal.SIGINT)
        code = being.wait()  # fails after WAIT_SECS, far less than the 600 s of sleep
        assert len(server.completions) == 1
    state = assert_graceful_stop(tmp_path, code)
    assert state.cycle == 1


def test_a_second_signal_saves_and_exits_at_once(
    tmp_path: Path, spawn: Callable[..., Being]
) -> None:
    with ScriptedServer([Turn.text("too late").delayed(600.0)]) as server:
        being = spawn(server, "--input-price", "1", "--max-tokens", "100")
        wait_until(lambda: len(server.completions) == 1, "the model call", being)
        being.send(signal.SIGTERM)
        wait_until(
            lambda: "stopping at the next safe point" in being.stderr(), "the first signal", being
        )
        being.send(signal.SIGTERM)
        code = being.wait()  # fails after WAIT_SECS, far less than the 600 s the answer takes
    assert code == 0  # the stop that was asked for happened
    state = state_of(tmp_path)  # parseable
    assert state.status == "stopped"
    assert dangling_calls(state.conversation) == []
    # The call in flight may have been processed: its reservation is paid, once, now.
    events = journal(tmp_path)
    assert types(events)[-5:] == [
        "cycle_started",
        "cost_reserved",
        "cost_debited",
        "warning",
        "stopped",
    ]
    reserved, debited, warning = events[-4:-1]
    assert debited["operation_id"] == reserved["operation_id"]
    assert (debited["api"], debited["instance"]) == (reserved["api"], reserved["instance"])
    assert warning["message"] == IN_FLIGHT_CHARGED
    assert verify_state_dir(str(tmp_path / "being")) == []
    budget = state.budget
    assert budget.last_operation == reserved["operation_id"]
    assert budget.api_spent == Decimal(reserved["api"]) > 0
    # The next boots charge nothing more.
    settings = resolve(
        {
            "state_dir": str(tmp_path / "being"),
            "workspace": str(tmp_path / "ws"),
            "resume": "true",
            "input_price": "1",
        },
        environ={},
    )

    async def resume() -> None:
        runtime = Runtime.boot(settings)
        await runtime.shutdown()

    asyncio.run(resume())
    asyncio.run(resume())
    debits = [e for e in journal(tmp_path) if e["type"] == "cost_debited"]
    assert [e["operation_id"] for e in debits] == [reserved["operation_id"]]
    assert state_of(tmp_path).budget == budget


def test_stop_now_answers_the_call_in_flight_and_those_that_never_ran(tmp_path: Path) -> None:
    """What the second signal does when it lands while a tool call is running."""
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(arguments: dict[str, Any]) -> Outcome:
        started.set()
        await release.wait()
        return Outcome.success({"done": True})

    def tools(being: LiveBeing) -> list[Toolset]:
        schema = {"type": "object", "properties": {}}
        return [FunctionToolset([FunctionTool(ToolDefinition("slow", "slow", schema), slow)])]

    calls = [
        Call(ADD_RULE, '{"rule":"first"}', "c1"),
        Call("slow", "{}", "c2"),
        Call(ADD_RULE, '{"rule":"third"}', "c3"),
    ]
    with ScriptedServer([Turn.tool_calls(*calls)]) as server:

        async def go() -> None:
            runtime = boot(tmp_path, server, extra_toolsets=tools)
            cycle = asyncio.create_task(live_cycle(runtime.life))
            await started.wait()
            runtime.stop_now()
            cycle.cancel()
            runtime.being.close()

        asyncio.run(go())
    state = state_of(tmp_path)
    assert state.status == "stopped"
    assert dangling_calls(state.conversation) == []
    results = {m["tool_call_id"]: m["content"] for m in state.conversation if m["role"] == "tool"}
    assert json.loads(results["c1"])["status"] == "success"
    assert results["c2"] == INTERRUPTED_CONTENT
    assert results["c3"] == CANCELLED_CONTENT
    assert state.mind.rules == ["first"]
    assert [(a.tool, a.status) for a in state.recent_actions] == [
        (ADD_RULE, "success"),
        ("slow", "indeterminate"),
    ]
    finished = [(e["tool"], e["status"]) for e in journal(tmp_path) if e["type"] == "tool_finished"]
    assert finished == [(ADD_RULE, "success"), ("slow", "indeterminate")]
    assert journal(tmp_path)[-1]["type"] == "stopped"
