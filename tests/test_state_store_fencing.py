"""The fencing lease: a runtime frozen past its lease cannot write once another took over.

A worker process lives steps on a being in PostgreSQL; it is frozen with SIGSTOP, its
lease runs out, this test takes the being over and lives steps of its own, then the worker
is resumed with SIGCONT. Its next step must be refused (it exits saying so) and the being
must hold each step exactly once: the worker's until the freeze, then ours.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from singularity.errors import FatalIoError, StateLockedError
from singularity.store.base import LeaseLost
from singularity.store.postgres.store import PostgresStore
from tests.support.stores import a_being, live_a_step, new_place, store_url

ROOT = Path(__file__).resolve().parent.parent
LEASE_SECS = 1.0


def _take_over(url: str, place: str) -> PostgresStore:
    deadline = time.monotonic() + 60
    while True:
        try:
            return PostgresStore.open(url, place, lease_secs=LEASE_SECS)
        except StateLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(LEASE_SECS / 4)  # polling for the frozen runtime's lease to run out


@pytest.mark.timeout(120)
def test_a_frozen_runtime_cannot_write_after_a_takeover(tmp_path: Path) -> None:
    url, place = store_url(), new_place("postgresql", tmp_path)
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.support.store_worker", "postgresql", place, url,
         str(LEASE_SECS)],
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
