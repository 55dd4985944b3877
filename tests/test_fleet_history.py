"""A being's workflow continues as new when its history grows, and the being lives on with
its state: the same cycles counted, the same worker holding it, the same money; every run's
history stays small. On Temporal's time-skipping test server (the interval is skipped)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from singularity.domain.operator import new_request
from singularity.fleet import control
from singularity.fleet.messages import BeingSpec, Carry, Status
from singularity.fleet.workflow import BeingWorkflow
from singularity.testing.scripted_server import ScriptedServer, Turn
from singularity.timestamps import now_text
from tests.support.fleet import QUEUE, check_life, in_process_worker, journal, time_skipping_server
from tests.support.polling import DEFAULT_TIMEOUT

PRICES = {"input_price": "1", "output_price": "2"}
HISTORY_EVENTS = 60
"""A run's history limit for the test: a few cycles' worth."""
CYCLE_EVENTS = 30
"""Events of one cycle at most, with an operator's message and the wait for its reply."""
RUNS = 3
KEY = "ada"


@dataclass
class Lived:
    status: Status
    lengths: list[int]
    """History length of each run, oldest first."""
    replies: list[dict[str, str]]
    ended: Status


async def _run_lengths(client: Client, first_run: str) -> list[int]:
    """The history length of every run of the being's workflow, from the first run along
    its continue-as-new chain."""
    lengths, run_id = [], first_run
    while run_id:
        history = await client.get_workflow_handle(KEY, run_id=run_id).fetch_history()
        lengths.append(len(history.events))
        last = history.events[-1]
        continued = last.workflow_execution_continued_as_new_event_attributes
        run_id = (
            continued.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else ""
        )
    return lengths


async def _long_life(root: Path, gateway: ScriptedServer) -> Lived:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=time_skipping_server()
    )
    options = {"starting_balance": "5", "cycle_interval_secs": "60"}
    params = {"brama_url": gateway.url, **PRICES}
    async with env, in_process_worker(env.client, root, params):
        carry = Carry(BeingSpec(KEY, options), history_events=HISTORY_EVENTS)
        handle = await env.client.start_workflow(BeingWorkflow.run, carry, id=KEY, task_queue=QUEUE)
        deadline = time.monotonic() + DEFAULT_TIMEOUT * 3
        while (await handle.query(BeingWorkflow.status)).runs < RUNS:
            assert time.monotonic() < deadline, "timed out waiting for the workflow to continue"
            await env.sleep(60)
        # An operator's message and its reply across the runs: `say --wait`.
        replies = []
        for text in ("first", "second", "third"):
            message = new_request("message", now_text(), text=text)
            latest = env.client.get_workflow_handle_for(BeingWorkflow.run, KEY)
            await latest.execute_update(BeingWorkflow.operator, message.to_json())
            replies.append(await control.reply(env.client, KEY, message.id))
        status = await env.client.get_workflow_handle_for(BeingWorkflow.run, KEY).query(
            BeingWorkflow.status
        )
        stop = new_request("stop", now_text())
        latest = env.client.get_workflow_handle_for(BeingWorkflow.run, KEY)
        await latest.execute_update(BeingWorkflow.operator, stop.to_json())
        ended: Status = await latest.result()
        assert (await latest.describe()).status is WorkflowExecutionStatus.COMPLETED
        assert handle.result_run_id is not None
        lengths = await _run_lengths(env.client, handle.result_run_id)
    return Lived(status, lengths, replies, ended)


@pytest.mark.timeout(300)
def test_a_being_continues_as_new_and_lives_on_with_its_state(tmp_path: Path) -> None:
    with ScriptedServer([], default=Turn.text("still here")) as gateway:
        lived = asyncio.run(_long_life(tmp_path, gateway))
    events = journal(tmp_path / KEY / "state")
    assert check_life(events) == []
    cycles = [e["cycle"] for e in events if e["type"] == "cycle_finished"]
    assert cycles == list(range(1, len(cycles) + 1))
    # The workflow's count of cycles and the being's agree across every run.
    assert lived.ended.cycles == len(cycles) == lived.ended.cycle
    assert lived.status.runs >= RUNS
    assert len(lived.lengths) == lived.ended.runs
    # No run's history grew past the limit by more than one cycle's events.
    assert max(lived.lengths) <= HISTORY_EVENTS + CYCLE_EVENTS, lived.lengths
    # The being was opened once: each new run visited it where the last one left it.
    assert [e["type"] for e in events].count("started") == 1
    assert [reply["reply"] for reply in lived.replies] == ["still here"] * 3
    assert lived.ended.status == "stopped"
    assert events[-1]["type"] == "stopped"


async def _paused_reply(root: Path, gateway: ScriptedServer) -> tuple[dict[str, str], Status]:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=time_skipping_server()
    )
    options = {"starting_balance": "5", "cycle_interval_secs": "3600"}
    params = {"brama_url": gateway.url, **PRICES}
    async with env, in_process_worker(env.client, root, params):
        carry = Carry(BeingSpec(KEY, options), history_events=HISTORY_EVENTS)
        await env.client.start_workflow(BeingWorkflow.run, carry, id=KEY, task_queue=QUEUE)

        async def ask(kind: str, **fields: str) -> str:
            made = new_request(kind, now_text(), **fields)  # type: ignore[arg-type]
            latest = env.client.get_workflow_handle_for(BeingWorkflow.run, KEY)
            await latest.execute_update(BeingWorkflow.operator, made.to_json())
            return made.id

        async def status() -> Status:
            latest = env.client.get_workflow_handle_for(BeingWorkflow.run, KEY)
            return await latest.query(BeingWorkflow.status)

        await ask("pause")
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        while (await status()).status != "paused":
            assert time.monotonic() < deadline, "timed out waiting for the pause"
            await asyncio.sleep(0.05)
        message = await ask("message", text="are you there?")
        latest = env.client.get_workflow_handle_for(BeingWorkflow.run, KEY)
        reply = asyncio.ensure_future(control.reply(env.client, KEY, message))
        # Operator credits while the reply waits, until the history is past its limit.
        runs = (await status()).runs
        while (await status()).runs == runs and len((await latest.fetch_history()).events) < (
            HISTORY_EVENTS * 2
        ):
            before = (await status()).visits
            await ask("credit", amount="0.01")
            while (await status()).visits == before:
                assert time.monotonic() < deadline, "timed out waiting for a credit's visit"
                await asyncio.sleep(0.05)
        await ask("resume")
        answered = await asyncio.wait_for(reply, DEFAULT_TIMEOUT)
        await ask("stop")
        ended = await env.client.get_workflow_handle_for(BeingWorkflow.run, KEY).result()
    return answered, ended


@pytest.mark.timeout(300)
def test_a_reply_awaited_while_the_history_fills_still_comes(tmp_path: Path) -> None:
    """A paused being with a message whose reply an operator awaits: the history fills
    (each credit is a visit) and the workflow continues as new; the resumed being reads
    the message, and the awaited reply comes."""
    with ScriptedServer([], default=Turn.text("here I am")) as gateway:
        answered, ended = asyncio.run(_paused_reply(tmp_path, gateway))
    assert (answered["status"], answered["reply"]) == ("completed", "here I am")
    assert ended.runs >= 2
    assert check_life(journal(tmp_path / KEY / "state")) == []
