"""A fleet that loses workers: the Temporal dev server, three `singularity worker` processes,
beings on the scripted gateway with prices; one worker is killed (SIGKILL) while a cycle is
in flight, another frozen (SIGSTOP) and resumed later. Every being lives on, no being runs
two cycles at once, every reservation is settled and every debit recorded exactly once,
and `verify` passes for all.

On a directory store a frozen worker keeps the beings it held (their lock) until it is
resumed; the others live on meanwhile.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from singularity.fleet.dev import TemporalDevServer
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.fleet import (
    SINGULARITY,
    WorkerProcess,
    check_life,
    cycles_of,
    dev_server,
    journal,
    verify,
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


def _state(root: Path, key: str) -> Path:
    return root / key / "state"


def _in_flight(state_dir: Path) -> bool:
    events = journal(state_dir)
    return bool(events) and events[-1]["type"] == "cost_reserved"


def _open_reservation(state_dir: Path) -> dict[str, Any] | None:
    events = journal(state_dir)
    return events[-1] if events and events[-1]["type"] == "cost_reserved" else None


def _kill_mid_call(worker: WorkerProcess, state_dirs: list[Path]) -> dict[Path, dict[str, Any]]:
    """SIGKILL the worker while a model call of one of its beings is in flight; the
    reservations it left open, by state directory. The worker is frozen first, so that
    what the journals show is what it leaves."""
    while True:
        wait_for(
            lambda: any(_in_flight(path) for path in state_dirs),
            "a cycle in flight on the worker to kill",
        )
        worker.signal(signal.SIGSTOP)
        wait_for(worker.frozen, "the worker to freeze")
        found = {path: r for path in state_dirs if (r := _open_reservation(path)) is not None}
        if found:
            worker.signal(signal.SIGKILL)
            return found
        worker.signal(signal.SIGCONT)  # the call ended meanwhile: try the next one


def _lived_on(
    root: Path,
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
            lambda: all(cycles_of(_state(root, k)) >= marks[k] + LIVED_AFTER for k in keys),
            f"{who} to live on",
            timeout=RECOVERY,
        )
    except AssertionError as timeout:
        behind = {
            key: (marks[key], cycles_of(_state(root, key)))
            for key in keys
            if cycles_of(_state(root, key)) < marks[key] + LIVED_AFTER
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
        (i, e) for i, e in enumerate(events)
        if e.get("operation_id") == operation and e["type"] in ("cost_debited", "cost_released")
    ]
    assert len(settled) == 1, settled
    index, debit = settled[0]
    assert debit["type"] == "cost_debited"
    assert (debit["api"], debit["instance"]) == (reservation["api"], reservation["instance"])
    assert index > at
    assert not any(e["type"] == "model_completed" for e in events[at:index])


def _chaos(tmp_path: Path, server: TemporalDevServer, beings: int) -> None:
    root = tmp_path / "beings"
    target = server.target
    keys = [f"being-{index}" for index in range(beings)]
    with ScriptedServer([], default=Turn.text("idle").delayed(0.2)) as gateway:
        flags = [
            "--brama-url", gateway.url,
            "--input-price", "1", "--output-price", "2", "--instance-price", "0.5",
            "--cycle-interval-secs", "0.2", "--keep-idle", "30",
        ]
        workers = [
            WorkerProcess(target, root, flags, tmp_path / f"worker-{n}.log") for n in range(WORKERS)
        ]
        try:
            for key in keys:
                _fleet(target, "start", key, "--set", "starting_balance=50")
            wait_for(
                lambda: all(cycles_of(_state(root, key)) >= 2 for key in keys),
                "every being to live",
                timeout=RECOVERY,
            )
            held = {worker.name: worker for worker in workers}
            holders: dict[str, list[str]] = {name: [] for name in held}
            for being in _fleet(target, "list", "--json"):
                if being["worker"] in holders:
                    holders[being["worker"]].append(being["key"])
            ranked = sorted(holders, key=lambda name: -len(holders[name]))
            victim, frozen = held[ranked[0]], held[ranked[1]]
            victims = holders[ranked[0]]
            lost = _kill_mid_call(victim, [_state(root, key) for key in victims])
            frozen.signal(signal.SIGSTOP)
            marks = {key: cycles_of(_state(root, key)) for key in keys}
            free = [key for key in keys if key not in holders[ranked[1]]]
            _lived_on(root, target, free, marks, "the beings of the killed worker", workers)
            frozen.signal(signal.SIGCONT)
            _lived_on(root, target, keys, marks, "every being", workers)
            for key in keys:
                _fleet(target, "stop", key)
            wait_for(
                lambda: _fleet(target, "list", "--json") == [], "every being to stop",
                timeout=RECOVERY,
            )
        finally:
            for worker in workers:
                worker.stop()
        served = len(gateway.completions)
    answered = 0
    for key in keys:
        events = journal(_state(root, key))
        assert check_life(events) == [], key
        assert events[-1]["type"] == "stopped", key
        answered += _answered_debits(events)
        checked = verify(_state(root, key))
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 0 < answered <= served  # a call the gateway answered is paid once, or never was
    for state_dir, reservation in lost.items():
        _settled_once_by_another(journal(state_dir), reservation)


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


@pytest.mark.timeout(900)
def test_a_fleet_lives_on_when_workers_die_and_freeze(
    tmp_path: Path, dev_server: TemporalDevServer
) -> None:
    _chaos(tmp_path, dev_server, beings=4)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ten_beings_live_on_when_workers_die_and_freeze(
    tmp_path: Path, dev_server: TemporalDevServer
) -> None:
    _chaos(tmp_path, dev_server, beings=10)
