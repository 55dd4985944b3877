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

from singularity.domain.state import AgentState
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from tests.support.loop_http import boot, live_one_cycle, run
from tests.support.syncs import SyncLog

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
