"""The engine's overhead per cycle: beings on a Temporal fleet against `singularity run`.

    .venv/bin/python -m bench.fleet [--beings 50] [--workers 3] [--seconds 30] [--repeats 2]

The same beings live on both sides, against one zero-think-time `ScriptedServer` in this
process (prices above zero, so every cycle reserves and debits), with no sleep between
cycles:

- `run`: one `singularity run` process per being, each in a directory of its own;
- `fleet`: the Temporal dev server of the `[fleet]` extra, `--workers` `singularity worker`
  processes on a directory store, one workflow per being started from here.

A side is started, warmed until every being has finished a cycle (booted, and on the
fleet open on a worker), then its finished cycles are counted from the beings' activity
journals over `--seconds`, and it is stopped. The sides alternate (the fleet first on odd
repeats). Two figures, each the fleet's over `run`'s: cycles per second, and the CPU time
per cycle of the side's processes (the `run` processes; the workers and the Temporal
server), read from `/proc` over the same window: what the engine (workflow tasks, visits,
the server) costs on top of a cycle. The gateway's share is the same on both sides and
left out. Writes `bench/results/fleet-<time>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import machine, table, write_results
from singularity.testing.scripted_server import ScriptedServer, Turn

SINGULARITY = str(Path(sys.executable).with_name("singularity"))
FINISHED = b'"type":"cycle_finished"'
BALANCE = "1000"
WARM_TIMEOUT = 600.0
POLL_SECS = 0.5


def being_flags(gateway: ScriptedServer) -> list[str]:
    """Runtime flags both sides share: the gateway, prices, no sleep between cycles."""
    return [
        "--brama-url",
        gateway.url,
        "--input-price",
        "1",
        "--output-price",
        "2",
        "--cycle-interval-secs",
        "0",
    ]


def finished_cycles(journals: list[Path]) -> int:
    """Cycles finished so far, over every being's activity journal."""
    total = 0
    for path in journals:
        with contextlib.suppress(FileNotFoundError):
            total += path.read_bytes().count(FINISHED)
    return total


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WARM_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(POLL_SECS)


def _warm(journals: list[Path]) -> None:
    _wait(lambda: all(finished_cycles([path]) > 0 for path in journals), "every being to live")


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time used so far by these processes (their threads included)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _count(journals: list[Path], pids: list[int], seconds: float) -> dict[str, Any]:
    before, cpu, start = finished_cycles(journals), cpu_seconds(pids), time.monotonic()
    time.sleep(seconds)
    cycles = finished_cycles(journals) - before
    return {
        "cycles": cycles,
        "seconds": time.monotonic() - start,
        "cpu_seconds": cpu_seconds(pids) - cpu,
    }


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _spawn(command: list[str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )


def run_side(root: Path, gateway: ScriptedServer, beings: int, seconds: float) -> dict[str, Any]:
    """`beings` `singularity run` processes; their finished cycles over `seconds`."""
    processes, journals = [], []
    for index in range(beings):
        home = root / f"being-{index}"
        home.mkdir()
        command = [
            SINGULARITY,
            "run",
            "--agent-id",
            f"being-{index}",
            "--starting-balance",
            BALANCE,
            *being_flags(gateway),
        ]
        processes.append(_spawn(command, home, home / "run.log"))
        journals.append(home / ".singularity" / "activity.jsonl")
    try:
        _warm(journals)
        return _count(journals, [process.pid for process in processes], seconds)
    finally:
        _stop(processes)


def fleet_side(
    root: Path, gateway: ScriptedServer, beings: int, workers: int, seconds: float
) -> dict[str, Any]:
    """`beings` workflows on `workers` worker processes; their finished cycles."""
    from singularity.fleet.dev import TemporalDevServer

    store = root / "beings"
    keys = [f"being-{index}" for index in range(beings)]
    journals = [store / key / "state" / "activity.jsonl" for key in keys]
    server = TemporalDevServer(log_path=str(root / "temporal.log")).start()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        command = [
            SINGULARITY,
            "worker",
            "--temporal",
            server.target,
            "--state-url",
            str(store),
            "--keep-idle",
            "3600",
            *being_flags(gateway),
        ]
        processes = [_spawn(command, root, root / f"worker-{n}.log") for n in range(workers)]
        asyncio.run(_start(server.target, keys))
        _warm(journals)
        assert server.process is not None
        pids = [process.pid for process in processes] + [server.process.pid]
        counted = _count(journals, pids, seconds)
        asyncio.run(_end(server.target, keys))
    finally:
        _stop(processes)
        server.stop()
    return counted


async def _start(target: str, keys: list[str]) -> None:
    from singularity.fleet import control
    from singularity.fleet.connection import TemporalConnection, connect
    from singularity.fleet.messages import DEFAULT_QUEUE

    client = await connect(TemporalConnection(target))
    for key in keys:
        await control.start(client, key, {"starting_balance": BALANCE}, DEFAULT_QUEUE)


async def _end(target: str, keys: list[str]) -> None:
    from singularity.fleet.connection import TemporalConnection, connect

    client = await connect(TemporalConnection(target))
    for key in keys:
        await client.get_workflow_handle(key).terminate("the bench is over")


@contextlib.contextmanager
def scratch(base: str | None) -> Iterator[Path]:
    """A fresh directory for one side's beings, removed after."""
    path = Path(tempfile.mkdtemp(prefix="bench-fleet-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beings", type=int, default=50)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", default=None, help="where the beings live (default: tmp)")
    options = parser.parse_args()
    report: dict[str, Any] = {
        "machine": machine(Path(options.dir or tempfile.gettempdir())),
        "command": " ".join(sys.argv),
        "beings": options.beings,
        "workers": options.workers,
        "runs": [],
    }
    with ScriptedServer([], default=Turn.text("idle")) as gateway:
        for repeat in range(options.repeats):
            order = ("fleet", "run") if repeat % 2 == 0 else ("run", "fleet")
            for side in order:
                with scratch(options.dir) as root:
                    if side == "run":
                        found = run_side(root, gateway, options.beings, options.seconds)
                    else:
                        found = fleet_side(
                            root, gateway, options.beings, options.workers, options.seconds
                        )
                found.update(
                    side=side,
                    repeat=repeat,
                    per_second=found["cycles"] / found["seconds"],
                    cpu_ms_per_cycle=1000 * found["cpu_seconds"] / max(found["cycles"], 1),
                )
                report["runs"].append(found)
                print(
                    f"{side}: {found['per_second']:.2f} cycles/s, "
                    f"{found['cpu_ms_per_cycle']:.1f} ms CPU a cycle",
                    flush=True,
                )
    rows = []
    for repeat in range(options.repeats):
        sides = {r["side"]: r for r in report["runs"] if r["repeat"] == repeat}
        run, fleet = sides["run"], sides["fleet"]
        rows.append(
            [
                str(repeat + 1),
                f"{run['per_second']:.2f}",
                f"{fleet['per_second']:.2f}",
                f"{fleet['per_second'] / run['per_second']:.2f}",
                f"{run['cpu_ms_per_cycle']:.1f}",
                f"{fleet['cpu_ms_per_cycle']:.1f}",
                f"{fleet['cpu_ms_per_cycle'] / run['cpu_ms_per_cycle']:.2f}",
            ]
        )
    headers = [
        "repeat",
        "run cycles/s",
        "fleet cycles/s",
        "fleet/run",
        "run CPU ms/cycle",
        "fleet CPU ms/cycle",
        "fleet/run",
    ]
    print(table(headers, rows))
    print(f"written to {write_results('fleet', report)}")


if __name__ == "__main__":
    main()
