"""A worker process: beings' workflows and visits on a task queue, and a queue of its own.

`singularity worker --temporal HOST:PORT --state-url … [--local-dir D] [--task-queue Q]`
(`--local-dir` with a PostgreSQL store: the beings' local files on this machine; over TLS with
the options of `singularity.fleet.connection`) polls two queues: the shared one (workflow
tasks, and visits that open a being anywhere) and its own (visits to the beings it holds
open). SIGTERM or SIGINT stops it gracefully: visits in flight end at their beings' next
safe point, every held being is shut down and its hold released, and the workflows carry
on with the other workers.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.worker import Worker

from singularity.fleet.activities import VisitActivity
from singularity.fleet.connection import TemporalConnection, connect
from singularity.fleet.places import FleetStore
from singularity.fleet.residents import KEEP_IDLE_SECS, Residents, worker_name
from singularity.fleet.workflow import BeingWorkflow

log = logging.getLogger(__name__)
GRACE = timedelta(seconds=60)
"""How long a stopping worker lets its visits reach a safe point."""
IDLE_CHECK_SECS = 10.0
MAX_VISITS = 64
"""Visits one worker runs at once."""


@dataclass(frozen=True)
class WorkerOptions:
    """What a worker needs: where Temporal and the store are, and the beings' settings."""

    connection: TemporalConnection
    state_url: str
    task_queue: str
    local_dir: str | None = None
    """The beings' local files on this machine, when their state lives in PostgreSQL."""
    runtime_params: Mapping[str, Any] = field(default_factory=dict)
    config_file: str | None = None
    keep_idle_secs: float = KEEP_IDLE_SECS
    max_visits: int = MAX_VISITS


async def run_worker(options: WorkerOptions, *, ready: Callable[[str], None] | None = None) -> None:
    """Run until SIGTERM or SIGINT; `ready` is told the worker's own queue once it polls."""
    store = FleetStore.parse(options.state_url, options.local_dir)
    client = await connect(options.connection)
    name = worker_name()
    own_queue = f"{options.task_queue}@{name}:{uuid.uuid4().hex[:8]}"
    residents = Residents(
        options.runtime_params,
        options.config_file,
        store,
        own_queue,
        keep_idle_secs=options.keep_idle_secs,
        name=name,
    )
    visit = VisitActivity(residents)
    shared = Worker(
        client,
        task_queue=options.task_queue,
        workflows=[BeingWorkflow],
        activities=[visit.visit],
        max_concurrent_activities=options.max_visits,
        graceful_shutdown_timeout=GRACE,
        identity=name,
    )
    own = Worker(
        client,
        task_queue=own_queue,
        activities=[visit.visit],
        max_concurrent_activities=options.max_visits,
        graceful_shutdown_timeout=GRACE,
        identity=name,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    try:
        async with shared, own:
            log.info(
                "worker %s polling %s and %s at %s, beings in %s",
                name,
                options.task_queue,
                own_queue,
                options.connection.describe(),
                store.shown(),
            )
            if ready is not None:
                ready(own_queue)
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), IDLE_CHECK_SECS)
                except TimeoutError:
                    released = await residents.release_idle()
                    if released:
                        log.info("released %d idle being(s)", released)
            log.info("stopping: visits in flight end at their next safe point")
    finally:
        await residents.release_all()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(number)
