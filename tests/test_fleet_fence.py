"""A frozen worker cannot write to a being another worker took over (PostgreSQL store).

Two `singularity worker` processes on the Temporal dev server and the session's
PostgreSQL server, each with local files of its own as on a machine of its own. Worker A
lives a being's cycle whose model call the scripted gateway holds; A is frozen with
SIGSTOP. Its visit stops heartbeating and is retried on worker B, which takes the being
over once A's lease runs out, settles A's call in flight (its whole reservation: its
answer is unknown) and lives on. The held answer is then released and A resumed with
SIGCONT: A learns that its lease was taken over and writes nothing, and the being's
ledger holds every debit once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from singularity.fleet.dev import TemporalDevServer
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.fleet import (
    SINGULARITY,
    WorkerProcess,
    being_cycles,
    being_events,
    check_life,
    dev_server,
    fleet_store,
    priced_flags,
    verify_being,
)
from tests.support.polling import wait_for

__all__ = ["dev_server"]
TAKEOVER = 240.0
"""Temporal's heartbeat timeout, then the lease's time, then the retry's backoff."""


def _fleet(target: str, *arguments: str) -> Any:
    done = subprocess.run(
        [SINGULARITY, "fleet", *arguments, "--temporal", target],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.timeout(600)
def test_a_frozen_worker_cannot_write_after_another_took_its_being_over(
    tmp_path: Path, dev_server: TemporalDevServer
) -> None:
    target = dev_server.target
    key = f"ada-{uuid.uuid4().hex[:6]}"  # the PostgreSQL server outlives the test
    store_a = fleet_store("postgresql", tmp_path / "machine-a")
    store_b = fleet_store("postgresql", tmp_path / "machine-b")
    gate = threading.Event()
    script = [Turn.text("lost").held(gate)]
    with ScriptedServer(script, default=Turn.text("idle")) as gateway:
        flags = [*priced_flags(gateway, "0.2"), "--keep-idle", "60"]
        worker_a = WorkerProcess(target, store_a, flags, tmp_path / "worker-a.log")
        workers = [worker_a]
        try:
            _fleet(target, "start", key, "--set", "starting_balance=50")
            wait_for(lambda: gateway.completions, "worker A's held model call", timeout=120)
            [reservation] = [e for e in being_events(store_a, key) if e["type"] == "cost_reserved"]
            worker_a.signal(signal.SIGSTOP)
            wait_for(worker_a.frozen, "worker A to freeze")
            worker_b = WorkerProcess(target, store_b, flags, tmp_path / "worker-b.log")
            workers.append(worker_b)
            wait_for(
                lambda: being_cycles(store_a, key) >= 3, "worker B to live on", timeout=TAKEOVER
            )
            gate.set()  # A's answer waits in its socket
            worker_a.signal(signal.SIGCONT)
            wait_for(
                lambda: "was taken over by another runtime" in worker_a.log_path.read_text(),
                "worker A to learn that it lost the being",
            )
            woke_at = being_cycles(store_a, key)
            wait_for(lambda: being_cycles(store_a, key) >= woke_at + 2, "the being to live on")
            _fleet(target, "stop", key)
            wait_for(
                lambda: not any(b["key"] == key for b in _fleet(target, "list", "--json")),
                "the being to stop",
            )
        finally:
            for worker in workers:
                worker.stop()
    events = being_events(store_a, key)
    assert check_life(events) == []
    assert events[-1]["type"] == "stopped"
    operation = reservation["operation_id"]
    mine = [(i, e) for i, e in enumerate(events) if e.get("operation_id") == operation]
    # A's call in flight: reserved once, settled once by B for its whole reservation, and
    # A's answer, which came after B took over, is recorded nowhere.
    assert [e["type"] for _, e in mine] == ["cost_reserved", "cost_debited"], mine
    (reserved_at, _), (settled_at, debit) = mine
    assert (debit["api"], debit["instance"]) == (reservation["api"], reservation["instance"])
    assert not any(e["type"] == "model_completed" for e in events[reserved_at:settled_at])
    assert "opened " + key in worker_b.log_path.read_text()
    checked = verify_being(store_a, key)
    assert checked.returncode == 0, checked.stdout + checked.stderr
