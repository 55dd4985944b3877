"""One sync per durable step, at the system call: a cycle's state costs one fdatasync a step.

A resumed being in a state directory lives a cycle of tool rounds (rules and memories,
which write no file of their own) while every `fsio.sync` is recorded. Each durable step
the cycle commits makes exactly one sync, the data sync of its record in `state.redo`,
and nothing else of the state directory's files (`state.json`, `activity.jsonl`,
`conversation.jsonl`) is synced during the cycle: the step's events, completion and
debit ride in that one record, never a sync per event. Which events each step groups is
pinned by `tests/test_cycle.py` (the group-commit test), and that each is durable before
the next call by `tests/test_durability.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from singularity.domain.state import AgentState
from singularity.gateway.client import BramaClient
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from tests.support.loop_http import boot, live_one_cycle, run
from tests.support.syncs import Sync, SyncLog

ADD_RULE = "singularity_self_add_rule"
REMEMBER = "singularity_memory_remember"
STATE_FILES = ("state.json", "state.redo", "activity.jsonl", "conversation.jsonl")


def test_every_durable_step_of_a_cycle_is_one_data_sync_of_the_log(
    tmp_path: Path, sync_log: SyncLog
) -> None:
    with ScriptedServer([Turn.text("born")]) as server:
        live_one_cycle(tmp_path, server)

    script = [
        Turn.tool_calls(
            Call(ADD_RULE, '{"rule":"one"}'), Call(REMEMBER, '{"kind":"k","text":"t"}')
        ),
        Turn.tool_call(REMEMBER, {"kind": "k", "text": "u"}),
        Turn.tool_call(ADD_RULE, {"rule": "two"}),
        Turn.text("done"),
    ]
    per_step: list[list[Any]] = []
    with ScriptedServer(script) as server:

        async def cycle() -> tuple[int, int, int]:
            runtime = boot(tmp_path, server, resume="true")
            try:
                store = runtime.being.store
                commit = store.commit

                def counted(state: AgentState, events: Any) -> None:
                    before = len(sync_log.syncs)
                    commit(state, events)
                    per_step.append(sync_log.syncs[before:])

                store.commit = counted  # type: ignore[method-assign]
                start = len(sync_log.syncs)
                report = await runtime.once()
                assert report.status == "completed"
                return start, len(sync_log.syncs), len(per_step)
            finally:
                await runtime.shutdown()

        start, end, in_cycle = run(cycle())

    being = tmp_path / "being"
    assert in_cycle >= 8  # a reservation and a completion a round, an outcome a tool
    for syncs in per_step:  # the cycle's steps, then the stop's
        assert [(sync.name, sync.data_only) for sync in syncs] == [("redo.fsync", True)]
        assert syncs[0].path == str(being / "state.redo")
    of_state = [
        sync
        for sync in sync_log.syncs[start:end]
        if Path(sync.path).parent == being and Path(sync.path).name in STATE_FILES
    ]
    assert len(of_state) == in_cycle


def test_the_work_after_a_cycles_last_model_call_is_one_data_sync(
    tmp_path: Path, sync_log: SyncLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The closing step, the cycle's session note riding in its record: the note that makes
    the day's file (the first cycle) and the one appended to it (the second) alike."""
    answered: list[int] = []
    complete = BramaClient.complete

    async def marked(client: BramaClient, *args: Any, **kwargs: Any) -> Any:
        try:
            return await complete(client, *args, **kwargs)
        finally:
            answered.append(len(sync_log.syncs))

    monkeypatch.setattr(BramaClient, "complete", marked)
    script = [
        Turn.tool_call(REMEMBER, {"kind": "k", "text": "t"}),
        Turn.text("first cycle done"),
        Turn.text("second cycle done"),
    ]
    with ScriptedServer(script) as server:

        async def two_cycles() -> list[list[Sync]]:
            runtime = boot(tmp_path, server)
            tails = []
            try:
                for _ in range(2):
                    assert (await runtime.once()).status == "completed"
                    tails.append(sync_log.syncs[answered[-1] :])
            finally:
                await runtime.shutdown()
            return tails

        tails = run(two_cycles())

    being = tmp_path / "being"
    for tail in tails:
        assert [(sync.name, sync.data_only, sync.path) for sync in tail] == [
            ("redo.fsync", True, str(being / "state.redo"))
        ]
    [day] = (being / "sanctum" / "memory" / "sessions").glob("*-runtime.md")
    text = day.read_text()
    assert text.startswith("---\nauto: true\n")
    assert [text.count(f"\n## Cycle {cycle} (") for cycle in (1, 2)] == [1, 1]
