"""The beings a worker holds open, and the visit: the one function that animates a being.

A visit opens the being if this worker does not hold it yet (`Runtime.boot`, under the
store's single-writer hold: a being another runtime holds is refused, and the visit is
tried again once that hold runs out), hands the operator's requests to the being's inbox,
lets the desk apply them, lives one cycle or pulse if asked to and allowed, and reports.
Between visits the being stays open here, so the next visit (routed to this worker's own
queue) lives its cycle at once; a being idle for longer than `keep_idle_secs` is shut down
and its hold released, and any worker may open it again.

Each held being runs in a thread of its own, with its own event loop: the runtime's
durable writes are synchronous (each one synced to disk), and in one shared loop every
being of the worker would wait on every other's syncs.

Every durable step is the runtime's own, as in `singularity run`: the ledger's operation
ids make each debit count once across a retried visit, and the store's hold keeps a worker
that lost a being (killed, frozen) from writing to it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from singularity.domain.operator import OperatorRequest, parse_request
from singularity.errors import BramaError, SingularityError
from singularity.fleet.messages import BeingSpec, NewChild, PulsePlan, QuietWindow, Visit, Visited
from singularity.fleet.places import FleetStore, being_settings, child_key
from singularity.money import add, render_money
from singularity.runtime.family.children import ChildStart
from singularity.runtime.loop.cycle import can_afford_cycle
from singularity.runtime.loop.lifecycle import Runtime
from singularity.runtime.loop.sanctum import find_sanctum
from singularity.runtime.loop.schedule import schedule_for
from singularity.storage import inbox

log = logging.getLogger(__name__)
KEEP_IDLE_SECS = 300.0
T = TypeVar("T")


def worker_name() -> str:
    """This worker as `host:pid`."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Births:
    """The children a being funded since its last visit reported; the fleet's starter."""

    key: str
    children: list[NewChild] = field(default_factory=list)

    def start(self, child: ChildStart) -> dict[str, object]:
        """Note the child: the parent's workflow starts it as a child workflow after the visit."""
        key = child_key(self.key, child.child_id)
        self.children.append(
            NewChild(key, child.child_id, child.name, child.ticker, child.specialty)
        )
        return {"workflow_id": key}

    def taken(self) -> list[NewChild]:
        """The children noted since the last call."""
        children, self.children = self.children, []
        return children


class BeingThread:
    """A thread running an event loop of its own, where one being's runtime lives."""

    def __init__(self, key: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=key, daemon=True)
        self.thread.start()

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work` in this thread's loop and wait for its result here."""

        async def call() -> T:
            return await work()

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), self.loop))

    def call_soon(self, function: Callable[[], object]) -> None:
        """Call `function` in this thread's loop, soon."""
        self.loop.call_soon_threadsafe(function)

    async def close(self) -> None:
        """Stop the loop and wait for the thread to end."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        await asyncio.to_thread(self.thread.join)
        self.loop.close()


@dataclass
class Resident:
    """A being this worker holds open."""

    key: str
    runtime: Runtime
    births: Births
    thread: BeingThread
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    used_at: float = field(default_factory=time.monotonic)
    letting_go: bool = False
    """A cancelled visit asked this worker to let the being go: the visit in flight ends
    it, whether or not its cycle had already passed its last safe point."""


@dataclass
class Residents:
    """The beings one worker holds open, by key."""

    worker_params: Mapping[str, Any]
    config_file: str | None
    store: FleetStore
    queue: str
    """This worker's own queue."""
    keep_idle_secs: float = KEEP_IDLE_SECS
    name: str = field(default_factory=worker_name)
    held: dict[str, Resident] = field(default_factory=dict)
    _opening: dict[str, asyncio.Lock] = field(default_factory=dict)

    async def visit(self, visit: Visit) -> Visited:
        """Open the being if needed, apply the requests, live if asked, report."""
        requests = [parse_request(document) for document in visit.requests]
        while True:
            resident = await self._resident(visit.spec)
            async with resident.lock:
                if self.held.get(resident.key) is not resident:
                    continue  # released while this visit waited for it: open it again
                if not resident.letting_go:
                    return await self._visit_held(resident, visit, requests)
                await self._drop(resident)  # a cancelled visit asked to let it go

    async def _visit_held(
        self, resident: Resident, visit: Visit, requests: Sequence[OperatorRequest]
    ) -> Visited:
        """The visit of a being held here, under its lock."""
        resident.used_at = time.monotonic()
        try:
            visited, ended = await resident.thread.run(
                lambda: self._visit(resident, visit, requests)
            )
        except BaseException:
            await self._drop(resident)
            raise
        if ended or resident.letting_go:
            # A stop left pending here would end the next visit's being as `stopped`,
            # which its workflow takes for the end of its life.
            await self._drop(resident)
        return visited

    async def _visit(
        self, resident: Resident, visit: Visit, requests: Sequence[OperatorRequest]
    ) -> tuple[Visited, bool]:
        """The visit, in the being's thread; whether the being is done here."""
        runtime = resident.runtime
        _post(runtime, requests)
        runtime.settle_operator()
        if visit.rest or runtime.stop_event.is_set():
            await runtime.shutdown()
            return self._report(resident, requests), True
        lived, reply = None, None
        if visit.live and not runtime.paused and _may_live(runtime):
            lived, reply = await _live(runtime)
            runtime.settle_operator()
        ended = runtime.failure is not None or runtime.stop_event.is_set()
        if ended:
            await runtime.shutdown()
        return self._report(resident, requests, lived, reply), ended

    def request_stop(self, key: str) -> None:
        """Stop the being's cycle at its next safe point and let the being go (its visit
        was cancelled: a stop, or a visit Temporal gave up on and retries elsewhere)."""
        resident = self.held.get(key)
        if resident is not None:
            resident.letting_go = True
            resident.thread.call_soon(resident.runtime.request_stop)

    async def release_idle(self) -> int:
        """Shut down the beings no visit used for `keep_idle_secs`; how many."""
        now = time.monotonic()
        idle = [
            resident
            for resident in list(self.held.values())
            if now - resident.used_at > self.keep_idle_secs and not resident.lock.locked()
        ]
        for resident in idle:
            async with resident.lock:
                await self._drop(resident)
        return len(idle)

    async def release_all(self) -> None:
        """Shut every held being down (the worker stops): their holds are released at once."""
        for resident in list(self.held.values()):
            resident.thread.call_soon(resident.runtime.request_stop)
            async with resident.lock:
                await self._drop(resident)

    async def _resident(self, spec: BeingSpec) -> Resident:
        opening = self._opening.setdefault(spec.key, asyncio.Lock())
        async with opening:
            resident = self.held.get(spec.key)
            if resident is not None and not resident.runtime.closed:
                return resident
            settings = being_settings(self.worker_params, self.config_file, self.store, spec)
            if spec.parent is None:
                self.store.prepare(spec.key)
            self.store.check_grant(spec.key)
            births = Births(spec.key)
            thread = BeingThread(spec.key)

            async def boot() -> Runtime:
                runtime = Runtime.boot(settings, start_child=births.start)
                await runtime.start_extensions()
                return runtime

            try:
                runtime = await thread.run(boot)
            except BaseException:
                await thread.close()
                raise
            resident = Resident(spec.key, runtime, births, thread)
            self.held[spec.key] = resident
            log.info("opened %s (%s)", spec.key, resident.runtime.being.state.status)
            return resident

    async def _drop(self, resident: Resident) -> None:
        """Shut the being down here and forget it (a broken one writes nothing)."""
        if self.held.get(resident.key) is resident:
            del self.held[resident.key]
        try:
            with contextlib.suppress(SingularityError):
                await resident.thread.run(resident.runtime.shutdown)
        finally:
            await resident.thread.close()

    def _report(
        self,
        resident: Resident,
        requests: Sequence[OperatorRequest],
        lived: str | None = None,
        reply: str | None = None,
    ) -> Visited:
        runtime = resident.runtime
        state = runtime.being.state
        budget = state.budget
        desk = runtime.desk
        settled = [r.id for r in requests if desk is not None and desk.settled(r.id)]
        status = "paused" if runtime.paused and not runtime.closed else state.status
        return Visited(
            worker=self.name,
            queue=self.queue,
            status=status,
            cycle=state.cycle,
            balance_usd=render_money(budget.remaining),
            earned_usd=render_money(budget.earned),
            spent_usd=render_money(add(budget.api_spent, budget.instance_spent)),
            settled=settled,
            lived=lived,
            reply=reply,
            wait_secs=runtime.next_wait(),
            pulse=_pulse_plan(runtime),
            children=resident.births.taken(),
            failure=str(runtime.failure) if runtime.failure is not None else None,
        )


def _post(runtime: Runtime, requests: Sequence[OperatorRequest]) -> None:
    """Put each request not yet applied or waiting into the being's inbox, once."""
    desk = runtime.desk
    if desk is None or not requests:
        return
    fd = runtime.being.statedir.fd
    waiting = {posted.request.id for posted in inbox.pending(fd) if posted.request is not None}
    for request in requests:
        if desk.settled(request.id) or request.id in waiting:
            continue
        if request.kind == "stop":
            # Delivered now: a stop asked before this runtime opened the being still applies
            # (the desk ignores a stop older than its boot, which a fleet's reopening is).
            request = dataclasses.replace(request, at=runtime.being.now())
        desk.accept(request)


async def _live(runtime: Runtime) -> tuple[str, str | None]:
    """Live one cycle (a pulse in Pulse mode): its status and closing text.

    A tolerated failure is `failed` (journaled; the next visit waits longer); a permanent
    gateway error fails the being (`runtime.failure`), which the visit then shuts down.
    """
    try:
        lived = await runtime.live_step(schedule_for(runtime.settings.pulse))
    except BramaError as error:
        if runtime.failure is not error:
            raise
        return "failed", None
    if lived is None:
        return "failed", None
    return lived.status, lived.final_content


def _may_live(runtime: Runtime) -> bool:
    """Whether the being may live a cycle: solvent, not failed; an exhausted being that an
    operator topped up lives again."""
    state = runtime.being.state
    if runtime.failure is not None or state.status == "failed":
        return False
    if state.status == "exhausted":
        if not can_afford_cycle(runtime.life):
            return False
        state.status = "running"
    return True


def _pulse_plan(runtime: Runtime) -> PulsePlan | None:
    if not runtime.settings.pulse or runtime.closed:
        return None
    schedule = find_sanctum(runtime.life.extensions).schedule()
    quiet = [
        QuietWindow(window.start, window.end, int(window.offset.total_seconds()))
        for window in schedule.quiet
    ]
    return PulsePlan(schedule.frequency.total_seconds(), quiet)
