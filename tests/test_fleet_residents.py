"""A worker's held beings when visits to one being overlap.

A worker frozen while it visited a being wakes up with that visit lost (Temporal retried it
elsewhere) and, often, a fresh visit to the same being waiting for it. The lost visit's
cancellation stops the being at its next safe point and releases it; the visit that waited
must then open the being again and live, never report the released being as stopped (the
workflow would take that for the end of the being's life).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from singularity.fleet.messages import BeingSpec, Visit, Visited
from singularity.fleet.places import FleetStore
from singularity.fleet.residents import Residents
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.fleet import check_life, journal
from tests.support.polling import wait_for_async

PRICES = {"input_price": "1", "output_price": "2"}
KEY = "ada"


async def _overlap(root: Path, gateway: ScriptedServer, gate: threading.Event) -> list[Visited]:
    residents = Residents({"brama_url": gateway.url, **PRICES}, None, FleetStore(str(root)), "own")
    spec = BeingSpec(KEY, {"starting_balance": "5"})
    try:
        opened = await residents.visit(Visit(spec))
        held = residents.held[KEY]
        lost = asyncio.ensure_future(residents.visit(Visit(spec, live=True)))
        await wait_for_async(lambda: gateway.completions, "the lost visit's model call")
        waiting = asyncio.ensure_future(residents.visit(Visit(spec, live=True)))
        await asyncio.sleep(0)  # one turn of the loop: the new visit waits for the being
        assert held.lock.locked() and not lost.done() and not waiting.done()
        residents.request_stop(KEY)  # what the lost visit's cancellation does
        gate.set()
        stopped, visited = await lost, await waiting
        assert residents.held[KEY] is not held  # opened again
        return [opened, stopped, visited]
    finally:
        await residents.release_all()


def test_a_visit_that_waited_for_a_released_being_opens_it_again(tmp_path: Path) -> None:
    gate = threading.Event()
    with ScriptedServer([Turn.text("lost").held(gate)], default=Turn.text("idle")) as gateway:
        opened, stopped, visited = asyncio.run(_overlap(tmp_path, gateway, gate))
    assert (opened.status, opened.lived) == ("running", None)
    assert stopped.status == "stopped"
    assert (visited.status, visited.lived) == ("running", "completed")
    assert visited.cycle == stopped.cycle + 1
    events = journal(tmp_path / KEY / "state")
    assert check_life(events) == []
    assert [e["type"] for e in events].count("cycle_started") == visited.cycle


async def _let_go_between_visits(root: Path, gateway: ScriptedServer) -> list[Visited]:
    residents = Residents({"brama_url": gateway.url, **PRICES}, None, FleetStore(str(root)), "own")
    spec = BeingSpec(KEY, {"starting_balance": "5"})
    try:
        first = await residents.visit(Visit(spec, live=True))
        held = residents.held[KEY]
        residents.request_stop(KEY)  # a cancellation that came as the visit ended
        second = await residents.visit(Visit(spec, live=True))
        assert residents.held[KEY] is not held
        return [first, second]
    finally:
        await residents.release_all()


def test_a_being_let_go_between_visits_lives_in_the_next(tmp_path: Path) -> None:
    """A stop asked for a cancelled visit never outlives it: the next visit does not end
    the being as `stopped`, it opens it again and lives."""
    with ScriptedServer([], default=Turn.text("idle")) as gateway:
        first, second = asyncio.run(_let_go_between_visits(tmp_path, gateway))
    assert (first.status, first.lived) == ("running", "completed")
    assert (second.status, second.lived, second.cycle) == ("running", "completed", 2)
    events = journal(tmp_path / KEY / "state")
    assert check_life(events) == []
    kinds = [e["type"] for e in events if e["type"] in ("cycle_started", "stopped")]
    assert kinds == ["cycle_started", "stopped", "cycle_started", "stopped"]  # let go between
