"""Handing a request to a being, and waiting for what came of it (`say`, the console).

A living `run` takes the request through its local socket, queues it durably and wakes
at once; otherwise (a stopped being, or one that serves no socket) the request goes
straight into the inbox, where the being finds it at its next start or safe point.
Liveness is decided by the lock (decision 27). A being in a PostgreSQL store is reached
through the state directory its runtime recorded there, when that is on this host.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from singularity.domain import events
from singularity.domain.operator import OperatorRequest
from singularity.domain.records import ChatMessage
from singularity.errors import RuntimeFailure, StateError
from singularity.runtime.family.tree import is_alive
from singularity.runtime.mind_import.service import socket_path, submit_operator
from singularity.runtime.talk.being_feed import Feed
from singularity.runtime.talk.transcript import cycle_reply
from singularity.state_place import StorePlace
from singularity.storage import inbox
from singularity.storage.activity import Event
from singularity.storage.statedir import STATE_FILE
from singularity.store.directory import peek_state

POLL_SECS = 0.2
THROUGH = "messages go through that directory's inbox and socket, so they cannot reach it"


@dataclass(frozen=True)
class Delivery:
    """How a request was handed over: `socket` (a living being took it) or `inbox`."""

    request_id: str
    route: str


def deliver(state_dir: str, request: OperatorRequest) -> Delivery:
    """Hand a request to the being at `state_dir`."""
    if peek_state(state_dir) is None:
        raise StateError(f"no being state exists at {os.path.join(state_dir, STATE_FILE)}")
    return hand_over(state_dir, request)


def deliver_at(place: StorePlace, agent_id: str, request: OperatorRequest) -> Delivery:
    """Hand a request to the being at `place`: in a PostgreSQL store, through the state
    directory its runtime recorded, which must be on this host."""
    if not place.is_postgres:
        return deliver(place.location, request)
    from singularity.store.postgres.places import reachable_dir

    return hand_over(reachable_dir(place.location, agent_id, THROUGH), request)


def hand_over(state_dir: str, request: OperatorRequest) -> Delivery:
    """Hand a request to the being whose state directory (its inbox and socket) is
    `state_dir`, its state wherever it lives."""
    alive = is_alive(state_dir)
    service = socket_path(state_dir)
    if request.kind == "stop" and not alive:
        raise StateError("the being is not running; there is nothing to stop")
    if alive and os.path.lexists(service):
        submit_operator(service, request)
        return Delivery(request.id, "socket")
    inbox.post_at(state_dir, request)
    return Delivery(request.id, "inbox")


@dataclass(frozen=True)
class Outcome:
    """What came of an operator message: the cycle it reached and the being's reply."""

    cycle: int
    status: str
    reply: str | None


def wait_for_reply(
    feed: Feed,
    request_id: str,
    *,
    timeout: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Wait until the cycle that received the message ends; its status and reply."""
    deadline = None if timeout is None else time.monotonic() + timeout
    cycle: int | None = None
    messages: list[ChatMessage] = []
    while True:
        found, more = feed.next()
        messages += more
        for event in found:
            cycle, ended = _follow(event, request_id, cycle)
            if cycle is not None and ended is not None:
                messages += feed.next()[1]  # the state as the cycle left it
                reply = cycle_reply(messages, cycle) if ended == "completed" else None
                return Outcome(cycle, ended, reply)
        if deadline is not None and time.monotonic() > deadline:
            where = "reached the being" if cycle is None else f"got its reply (cycle {cycle})"
            raise RuntimeFailure(f"the message has not {where} within {timeout:g} s")
        sleep(POLL_SECS)


def _follow(event: Event, request_id: str, cycle: int | None) -> tuple[int | None, str | None]:
    """The cycle the message reached, and how that cycle ended once it has."""
    record = events.readable(event)
    if isinstance(record, events.OperatorMessage) and record.request_id == request_id:
        return record.cycle, None
    if isinstance(record, events.OperatorRequestRefused) and record.request_id == request_id:
        raise StateError(f"the being refused the message: {record.reason}")
    if cycle is None:
        return None, None
    if isinstance(record, events.CycleFinished) and record.cycle == cycle:
        return cycle, record.status
    if isinstance(record, events.CycleStarted) and record.cycle > cycle:
        return cycle, "ended by an error"
    if isinstance(record, events.Stopped):
        return cycle, f"stopped ({record.status})"
    return cycle, None
