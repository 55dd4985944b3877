"""A fleet that loses workers: the Temporal dev server, three `singularity worker` processes,
beings on the scripted gateway with prices; one worker is killed (SIGKILL) while a cycle is
in flight, another frozen (SIGSTOP) and resumed later. Every being lives on, no being runs
two cycles at once, every reservation is settled and every debit recorded exactly once,
and `verify` passes for all.

On a directory store a frozen worker keeps the beings it held (their lock) until it is
resumed; the others live on meanwhile. On a PostgreSQL store (each worker with local
files of its own, as on machines of their own) the frozen worker's beings are taken over
once their leases run out and live on elsewhere; when it wakes, the fence refuses its
writes, and still every debit is recorded once.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from singularity.fleet.dev import TemporalDevServer
from singularity.fleet.places import FleetStore
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.fleet import (
    SINGULARITY,
    STORES,
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
WORKERS = 3
LIVED_AFTER = 3
RECOVERY = 240.0


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


def _in_flight(store: FleetStore, key: str) -> bool:
    return _open_reservation(store, key) is not None


def _open_reservation(store: FleetStore, key: str) -> dict[str, Any] | None:
    events = being_events(store, key)
    return events[-1] if events and events[-1]["type"] == "cost_reserved" else None


def _kill_mid_call(
    worker: WorkerProcess, store: FleetStore, keys: list[str]
) -> dict[str, dict[str, Any]]:
    """SIGKILL the worker while a model call of one of its beings is in flight; the
    reservations it left open, by key. The worker is frozen first, so that what the
    journals show is what it leaves."""
    while True:
        wait_for(
            lambda: any(_in_flight(store, key) for key in keys),
            "a cycle in flight on the worker to kill",
        )
        worker.signal(signal.SIGSTOP)
        wait_for(worker.frozen, "the worker to freeze")
        found = {key: r for key in keys if (r := _open_reservation(store, key)) is not None}
        if found:
            worker.signal(signal.SIGKILL)
            return found
        worker.signal(signal.SIGCONT)  # the call ended meanwhile: try the next one


def _lived_on(
    store: FleetStore,
    target: str,
    keys: list[str],
    marks: dict[str, int],
    who: str,
    workers: list[WorkerProcess],
) -> None:
    """Wait until each of `keys` lived LIVED_AFTER cycles past its mark; on a timeout, say
    which beings stayed behind, where the fleet has them, and what the workers logged."""
    try:
        wait_for(
            lambda: all(being_cycles(store, k) >= marks[k] + LIVED_AFTER for k in keys),
            f"{who} to live on",
            timeout=RECOVERY,
        )
    except AssertionError as timeout:
        behind = {
            key: (marks[key], being_cycles(store, key))
            for key in keys
            if being_cycles(store, key) < marks[key] + LIVED_AFTER
        }
        for worker in workers:
            print(f"--- {worker.log_path.name} ({worker.name})")
            print("\n".join(worker.log_path.read_text(errors="replace").splitlines()[-40:]))
        listed = _fleet(target, "list", "--json")
        raise AssertionError(f"{timeout}; behind (mark, now): {behind}; fleet: {listed}") from None


def _settled_once_by_another(events: list[dict[str, Any]], reservation: dict[str, Any]) -> None:
    """The call in flight at the kill was settled exactly once, by the runtime that
    reopened the being, and paid its whole reservation (its answer was lost with the
    worker): never twice, never lost."""
    operation = reservation["operation_id"]
    at = next(i for i, e in enumerate(events) if e.get("operation_id") == operation)
    settled = [
        (i, e)
        for i, e in enumerate(events)
        if e.get("operation_id") == operation and e["type"] in ("cost_debited", "cost_released")
    ]
    assert len(settled) == 1, settled
    index, debit = settled[0]
    assert debit["type"] == "cost_debited"
    assert (debit["api"], debit["instance"]) == (reservation["api"], reservation["instance"])
    assert index > at
    assert not any(e["type"] == "model_completed" for e in events[at:index])


def _chaos(tmp_path: Path, server: TemporalDevServer, beings: int, backend: str) -> None:
    stores = [fleet_store(backend, tmp_path / f"beings-{n}") for n in range(WORKERS)]
    if backend == "directory":
        stores = [stores[0]] * WORKERS  # one directory, shared
    store = stores[0]
    target = server.target
    run = uuid.uuid4().hex[:6]  # the PostgreSQL server outlives the test
    keys = [f"being-{run}-{index}" for index in range(beings)]
    with ScriptedServer([], default=Turn.text("idle").delayed(0.2)) as gateway:
        flags = [*priced_flags(gateway, "0.2", "--instance-price", "0.5"), "--keep-idle", "30"]
        workers = [
            WorkerProcess(target, stores[n], flags, tmp_path / f"worker-{n}.log")
            for n in range(WORKERS)
        ]
        try:
            for key in keys:
                _fleet(target, "start", key, "--set", "starting_balance=50")
            wait_for(
                lambda: all(being_cycles(store, key) >= 2 for key in keys),
                "every being to live",
                timeout=RECOVERY,
            )
            held = {worker.name: worker for worker in workers}
            holders: dict[str, list[str]] = {name: [] for name in held}
            for being in _fleet(target, "list", "--json"):
                if being["worker"] in holders and being["key"] in keys:
                    holders[being["worker"]].append(being["key"])
            ranked = sorted(holders, key=lambda name: -len(holders[name]))
            victim, frozen = held[ranked[0]], held[ranked[1]]
            victims = holders[ranked[0]]
            lost = _kill_mid_call(victim, store, victims)
            frozen.signal(signal.SIGSTOP)
            marks = {key: being_cycles(store, key) for key in keys}
            # A frozen worker keeps a directory's locks; its leases run out.
            kept = holders[ranked[1]] if backend == "directory" else []
            free = [key for key in keys if key not in kept]
            _lived_on(store, target, free, marks, "the beings of the lost workers", workers)
            frozen.signal(signal.SIGCONT)
            _lived_on(store, target, keys, marks, "every being", workers)
            for key in keys:
                _fleet(target, "stop", key)
            wait_for(
                lambda: not any(b["key"] in keys for b in _fleet(target, "list", "--json")),
                "every being to stop",
                timeout=RECOVERY,
            )
        finally:
            for worker in workers:
                worker.stop()
        served = len(gateway.completions)
    answered = 0
    for key in keys:
        events = being_events(store, key)
        assert check_life(events) == [], key
        assert events[-1]["type"] == "stopped", key
        answered += _answered_debits(events)
        checked = verify_being(store, key)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 0 < answered <= served  # a call the gateway answered is paid once, or never was
    for key, reservation in lost.items():
        _settled_once_by_another(being_events(store, key), reservation)


def _answered_debits(events: list[dict[str, Any]]) -> int:
    """Debits of answered calls; every other debit charges a reservation whose call was
    lost with its worker, at the next boot, for its whole worst case (decision 30)."""
    reserved = {e["operation_id"]: e for e in events if e["type"] == "cost_reserved"}
    answered = 0
    for before, event in itertools.pairwise(events):
        if event["type"] != "cost_debited":
            continue
        if before["type"] == "model_completed":
            answered += 1
            continue
        reservation = reserved[event["operation_id"]]
        assert (event["api"], event["instance"]) == (reservation["api"], reservation["instance"])
    return answered


# The default tier keeps the fleet's production store; the directory store's run, where a
# frozen worker's beings only wait for it, is the slow tier's.
TIERED_STORES = [
    pytest.param(store, marks=[pytest.mark.slow] if store == "directory" else [])
    for store in STORES
]


@pytest.mark.parametrize("backend", TIERED_STORES)
@pytest.mark.timeout(900)
def test_a_fleet_lives_on_when_workers_die_and_freeze(
    tmp_path: Path, dev_server: TemporalDevServer, backend: str
) -> None:
    _chaos(tmp_path, dev_server, beings=4, backend=backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", STORES)
@pytest.mark.timeout(1800)
def test_ten_beings_live_on_when_workers_die_and_freeze(
    tmp_path: Path, dev_server: TemporalDevServer, backend: str
) -> None:
    _chaos(tmp_path, dev_server, beings=10, backend=backend)
