"""A being of the fleet that sleeps for days between pulses, on Temporal's time-skipping
test server: the workflow keeps Pulse's schedule in workflow time, with durable timers."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from singularity.domain.operator import new_request
from singularity.fleet.messages import BeingSpec, Carry, PulsePlan, QuietWindow, Visited
from singularity.fleet.workflow import BeingWorkflow, _next_pulse
from singularity.testing.scripted_server import ScriptedServer, Turn
from singularity.timestamps import now_text, parse_timestamp
from tests.support.fleet import QUEUE, in_process_worker, journal, time_skipping_server
from tests.support.polling import DEFAULT_TIMEOUT

PRICES = {"input_price": "1", "output_price": "2"}
DAYS = 3


async def _sleeper(root: Path, gateway: ScriptedServer) -> tuple[timedelta, str]:
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=time_skipping_server()
    )
    options = {"pulse": "true", "pulse_frequency": f"{DAYS}d", "starting_balance": "5"}
    params = {"brama_url": gateway.url, **PRICES}
    async with env, in_process_worker(env.client, root, params):
        started = await env.get_current_time()
        handle = await env.client.start_workflow(
            BeingWorkflow.run, Carry(BeingSpec("sleeper", options)), id="sleeper", task_queue=QUEUE
        )
        deadline = time.monotonic() + DEFAULT_TIMEOUT * 3
        while (await handle.query(BeingWorkflow.status)).cycles < 3:
            assert time.monotonic() < deadline, "timed out waiting for three pulses"
            await env.sleep(timedelta(hours=12))  # skipped: nothing runs meanwhile
        elapsed = await env.get_current_time() - started
        await handle.execute_update(
            BeingWorkflow.operator, new_request("stop", now_text()).to_json()
        )
        ended = await handle.result()
    return elapsed, ended.status


@pytest.mark.timeout(300)
def test_a_being_sleeps_for_days_between_pulses(tmp_path: Path) -> None:
    with ScriptedServer([], default=Turn.text("rested")) as gateway:
        elapsed, status = asyncio.run(_sleeper(tmp_path, gateway))
        completions = len(gateway.completions)
    assert status == "stopped"
    # The first pulse at once, each next one DAYS later in workflow time.
    assert elapsed >= timedelta(days=2 * DAYS)
    events = journal(tmp_path / "sleeper" / "state")
    finished = [e for e in events if e["type"] == "pulse_finished"]
    assert len(finished) >= 3
    assert {e["status"] for e in finished} == {"completed"}
    assert completions == len(finished)  # one model call per pulse, none between
    assert [e["type"] for e in events].count("cycle_started") == len(finished)


def test_the_next_pulse_follows_the_schedule_and_its_quiet_hours() -> None:
    visited = Visited("w", "q", "running", 1, "1", "0", "0", pulse=PulsePlan(DAYS * 86400.0))
    now = parse_timestamp("2026-01-01T10:00:00Z")
    assert _next_pulse(visited, now, now) == now + timedelta(days=DAYS)
    assert _next_pulse(visited, None, now) == now
    hourly = dataclasses.replace(
        visited, pulse=PulsePlan(3600.0, [QuietWindow(11 * 60, 13 * 60, 0)])
    )
    # Due at 11:00, inside the quiet hours 11:00-13:00: it starts when they end.
    assert _next_pulse(hourly, now, now) == parse_timestamp("2026-01-01T13:00:00Z")
