"""Crash tests of the state store: a process committing steps is killed at random moments.

After every kill the next process recovers the being (the directory replays its log, the
database has what it committed) and lives on. At the end the being must hold every step
a commit acknowledged, each exactly once: its events in order, no debit counted twice or
lost, every message in the archive or the window, every acknowledged memory.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from singularity.store.base import StateStore
from tests.support.stores import BACKENDS, new_place, once_free, open_store, store_url

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_KILLS = 10
SLOW_KILLS = 200
LEASE_SECS = 0.5


def _worker(backend: str, place: str, checkpoint: int) -> subprocess.Popen[str]:
    url = store_url() if backend == "postgresql" else "-"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.store_worker",
            backend,
            place,
            url,
            str(LEASE_SECS),
            str(checkpoint),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def _reopen(backend: str, place: str) -> StateStore:
    return once_free(lambda: open_store(backend, place), place, interval=LEASE_SECS / 4)


def _crash_loop(backend: str, tmp_path: Path, kills: int) -> None:
    place = new_place(backend, tmp_path)
    rng = random.Random(f"{backend}-{kills}")
    acked: dict[int, str] = {}
    for _ in range(kills):
        # A small checkpoint threshold, so that kills land in checkpoints too.
        worker = _worker(backend, place, checkpoint=rng.choice([4096, 1 << 20]))
        assert worker.stdout is not None
        ready = worker.stdout.readline()
        assert ready == "ready\n", f"the worker did not recover the being: {ready!r}"
        time.sleep(rng.uniform(0, 0.25))  # a random moment to kill it at
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        for line in worker.stdout.read().splitlines():
            _, step, memory = line.split()
            acked[int(step)] = memory
        worker.stdout.close()
    store = _reopen(backend, place)
    try:
        state = store.load()
        assert state is not None
        steps = state.cycle
        assert acked and steps >= max(acked)
        kept = {memory.id for memory in state.mind.memories}
        assert all(memory in kept for step, memory in acked.items() if step > steps - 1000)
        debits = [e["operation_id"] for e in store.events_at_open if e["type"] == "cost_debited"]
        assert debits == [f"call_{step}" for step in range(1, steps + 1)]
        assert state.budget.remaining == Decimal("10") - Decimal("0.001") * steps
        messages = [*store.archived(), *state.conversation]
        results = [json.loads(m["content"])["n"] for m in messages if m["role"] == "tool"]
        assert results == list(range(1, steps + 1))
        assert len(state.recent_actions) == min(100, steps)
    finally:
        store.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.timeout(300)
def test_a_killed_store_loses_no_acknowledged_step(backend: str, tmp_path: Path) -> None:
    _crash_loop(backend, tmp_path, DEFAULT_KILLS)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.timeout(3600)
def test_a_killed_store_loses_no_acknowledged_step_long(backend: str, tmp_path: Path) -> None:
    _crash_loop(backend, tmp_path, SLOW_KILLS)
