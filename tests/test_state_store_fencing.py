"""The fencing lease: a runtime frozen past its lease cannot write once another took over.

A worker process lives steps on a being in PostgreSQL; it is frozen with SIGSTOP, its
lease runs out, this test takes the being over and lives steps of its own, then the worker
is resumed with SIGCONT. Its next step must be refused (it exits saying so) and the being
must hold each step exactly once: the worker's until the freeze, then ours.

The same through the real runtime: a paying `singularity run` on a being in PostgreSQL is
frozen mid-life, a second runtime boots the being and lives cycles of it, and the first,
resumed, is refused its next write and stops; `singularity verify` passes and the ledger
holds every debit once.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest

from singularity.config import resolve
from singularity.errors import FatalIoError, StateLockedError
from singularity.runtime.loop.lifecycle import Runtime
from singularity.store.base import LeaseLost
from singularity.store.opening import StorePlace, peek_events_at
from singularity.store.postgres.store import PostgresStore
from singularity.testing.scripted_server import ScriptedServer
from tests.support.commands import clean_environment
from tests.support.loop_crash_ledger import debit_ids, ledger_problems
from tests.support.loop_crash_scenario import turns
from tests.support.polling import wait_for
from tests.support.stores import a_being, live_a_step, new_place, once_free, store_url

ROOT = Path(__file__).resolve().parent.parent
LEASE_SECS = 1.0


def _take_over(url: str, place: str) -> PostgresStore:
    return once_free(
        lambda: PostgresStore.open(url, place, lease_secs=LEASE_SECS),
        place,
        interval=LEASE_SECS / 4,
    )


@pytest.mark.timeout(600)
def test_a_frozen_runtime_cannot_write_after_a_takeover(tmp_path: Path) -> None:
    url, place = store_url(), new_place("postgresql", tmp_path)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.store_worker",
            "postgresql",
            place,
            url,
            str(LEASE_SECS),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None and worker.stderr is not None
    try:
        assert worker.stdout.readline() == "ready\n"
        assert worker.stdout.readline().startswith("ack ")
        os.kill(worker.pid, signal.SIGSTOP)
        with pytest.raises(StateLockedError):
            PostgresStore.open(url, place, lease_secs=LEASE_SECS)  # still held: refused
        ours = _take_over(url, place)
        try:
            state = ours.load()
            assert state is not None
            frozen_at = state.cycle
            assert ours.lease.epoch == 2
            for _ in range(5):
                state.cycle += 1
                ours.commit(state, live_a_step(state, state.cycle, memory_bytes=512))
            os.kill(worker.pid, signal.SIGCONT)
            assert worker.wait(timeout=60) != 0
            said = worker.stderr.read()
            assert "LeaseLost" in said and "another runtime" in said
            acks = [int(line.split()[1]) for line in worker.stdout.read().splitlines()]
            assert all(step <= frozen_at for step in acks)
            state.cycle += 1
            ours.commit(state, live_a_step(state, state.cycle, memory_bytes=512))
        finally:
            ours.close()
    finally:
        if worker.poll() is None:
            os.kill(worker.pid, signal.SIGCONT)
            worker.kill()
            worker.wait()
        worker.stdout.close()
        worker.stderr.close()
    check = _take_over(url, place)
    try:
        final = check.load()
        assert final is not None and final.to_json() == state.to_json()
        debits = [e["operation_id"] for e in check.events_at_open if e["type"] == "cost_debited"]
        assert debits == [f"call_{step}" for step in range(1, final.cycle + 1)]
        assert final.budget.remaining == Decimal("10") - Decimal("0.001") * final.cycle
        tool_results = [
            json.loads(m["content"])["n"]
            for m in [*check.archived(), *final.conversation]
            if m["role"] == "tool"
        ]
        assert tool_results == list(range(1, final.cycle + 1))
    finally:
        check.close()


def test_a_step_after_the_lease_was_taken_is_refused_in_process(tmp_path: Path) -> None:
    url, place = store_url(), new_place("postgresql", tmp_path)
    first = PostgresStore.open(url, place, lease_secs=0.2)
    state = a_being()
    first.load()
    first.commit(state, [])
    first.renewer.stop()  # as frozen: no renewal from here on
    second = _take_over(url, place)
    try:
        with pytest.raises(LeaseLost, match="taken over"):
            first.commit(state, live_a_step(state, 1))
        with pytest.raises(FatalIoError, match="not written again"):
            first.commit(state, [])  # and it stays refused
        loaded = second.load()
        assert loaded is not None and loaded.mind.memories == []
    finally:
        first.db.close()
        second.close()


def test_a_takeover_waits_for_the_step_in_flight_then_refuses_the_next(tmp_path: Path) -> None:
    # The step checks the lease by a share lock of its row, which the takeover's update
    # must wait for: the step in flight commits under the old epoch, and none after it.
    url, place = store_url(), new_place("postgresql", tmp_path)
    first = PostgresStore.open(url, place, lease_secs=LEASE_SECS)
    state = a_being()
    first.load()
    first.commit(state, [])
    first.renewer.stop()
    lease = first.lease
    taken: list[PostgresStore] = []
    with psycopg.connect(url, autocommit=True) as stepping, psycopg.connect(url) as watch:
        watch.autocommit = True
        watch.execute(
            "UPDATE singularity.leases SET expires_at = now() WHERE agent_id = %s", (place,)
        )
        with stepping.transaction():
            stepping.execute(
                "SELECT singularity.step(%s, %s, %s, %s, false, %s::jsonb)",
                (*lease.hold_arguments(), json.dumps({"events": [], "first_event": 1})),
            )
            taking = threading.Thread(target=lambda: taken.append(_take_over(url, place)))
            taking.start()
            wait_for(
                lambda: (
                    watch.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE %s",
                        ("%INSERT INTO singularity.leases%",),
                    ).fetchone()
                    == (1,)
                ),
                "the takeover waiting for the step's lock on the lease",
            )
            assert not taken
        taking.join()
    second = taken[0]
    try:
        assert second.lease.epoch == lease.epoch + 1
        with pytest.raises(LeaseLost, match="taken over"):
            first.commit(state, live_a_step(state, 1))
    finally:
        first.db.close()
        second.close()


# The paid, tool-heavy life of the crash loop (`test_crash_loop.py`).
RUNTIME_SETTINGS = {
    "input_price": "2.5",
    "output_price": "10",
    "instance_price": "3",
    "starting_balance": "3",
    "cycle_interval_secs": "0",
    "max_tool_rounds": "8",
    "max_tokens": "512",
    "context_tokens": "2048",
    "http_timeout_secs": "5",
}
EVENTS_BEFORE_FREEZE = 30


def _stored_events(db: psycopg.Connection[tuple[int]], agent: str) -> int:
    try:
        row = db.execute(
            "SELECT count(*) FROM singularity.activity WHERE agent_id = %s", (agent,)
        ).fetchone()
    except psycopg.errors.UndefinedTable:  # not migrated yet
        return 0
    return int(row[0]) if row else 0


async def _take_over_and_resume(second: Runtime, first: subprocess.Popen[bytes]) -> int:
    """Live cycles of the being taken over, resume the frozen runtime, live on; its exit code."""
    try:
        for _ in range(2):
            await second.once()
        os.kill(first.pid, signal.SIGCONT)
        code = await asyncio.to_thread(first.wait, 60)
        await second.once()
    finally:
        await second.shutdown()
    return code


@pytest.mark.timeout(600)
def test_a_frozen_singularity_run_is_refused_after_a_takeover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the in-process boot must not read a ./singularity.toml
    url, agent = store_url(), new_place("postgresql", tmp_path)
    (tmp_path / "workspace").mkdir()
    log = tmp_path / "first.log"
    with ScriptedServer(default=None) as server, psycopg.connect(url, autocommit=True) as db:
        server.add(*turns(0, 2000))
        flags = {
            **RUNTIME_SETTINGS,
            "workspace": str(tmp_path / "workspace"),
            "brama_url": server.url,
            "state_url": url,
            "agent_id": agent,
        }
        argv = [sys.executable, "-m", "singularity", "run", "--state-dir", str(tmp_path / "a")]
        for name, value in flags.items():
            argv += ["--" + name.replace("_", "-"), value]
        environment = clean_environment()
        with open(log, "w") as said:
            first = subprocess.Popen(argv, cwd=tmp_path, env=environment, stderr=said)
        try:
            wait_for(
                lambda: (
                    _stored_events(db, agent) >= EVENTS_BEFORE_FREEZE or first.poll() is not None
                ),
                "the first runtime's events",
            )
            assert first.poll() is None, log.read_text()[-2000:]
            os.kill(first.pid, signal.SIGSTOP)
            # Its lease runs out while it is frozen (it renews no more): ended here as its
            # expiry would end it, rather than waited for (30 s).
            db.execute(
                "UPDATE singularity.leases SET expires_at = now() WHERE agent_id = %s", (agent,)
            )
            second = Runtime.boot(
                resolve({**flags, "state_dir": str(tmp_path / "b"), "resume": True}, environ={})
            )
            frozen = list(second.being.events_at_open)
            assert asyncio.run(_take_over_and_resume(second, first)) != 0
            said = log.read_text()
            assert re.search("took the being over|lease was taken over", said), said[-2000:]
        finally:
            if first.poll() is None:
                os.kill(first.pid, signal.SIGCONT)
                first.kill()
                first.wait()
        epoch = db.execute(
            "SELECT epoch FROM singularity.leases WHERE agent_id = %s", (agent,)
        ).fetchone()
        assert epoch == (2,)
    place = StorePlace.parse(url)
    journal = peek_events_at(place, agent)
    assert journal[: len(frozen)] == frozen and len(journal) > len(frozen)
    state = second.being.state
    assert ledger_problems(state, journal) == []
    assert len(set(debit_ids(journal))) == len(debit_ids(journal))
    verify = subprocess.run(
        [sys.executable, "-m", "singularity", "verify", "--state-url", url, "--agent-id", agent],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
