"""Where a cycle of `bench.rounds` goes, a full being against a fresh one, over many runs.

    .venv/bin/python -m bench.rounds_phases [--side postgres|directory] [--rounds 1]
                                            [--runs 30] [--postgres-url URL]

`bench.rounds` gives the median of three runs; on a shared machine one cycle's CPU
spreads over twice its median, so a gap of a millisecond between a full being and a fresh
one is not told from noise there. This bench lives the same runs as `bench.rounds` does
for one side (a being made, copied into the store for `postgres`, booted, a warm-up cycle
of one round, then the timed cycle of `--rounds`), `--runs` times for each being, fresh
and full alternating, their order reversed on every other run. For the timed cycle it
gives the wall time and the CPU seconds of this process (median and mean over the runs),
the CPU of the PostgreSQL server's processes when this bench started the server (Linux:
`/proc/<pid>/schedstat` of the postmaster and its children), and per phase (the save,
the store's step and its parts, the sanctum's section of the prompt when it is composed
anew) the CPU and wall time per cycle, summed over the calls the cycle made. Prints a table and writes `bench/results/rounds-phases-<time>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import machine, table, write_results
from bench.rounds import KINDS, WARM_UP_ROUNDS, boot_ours, script
from bench.scripted_process import ServerProcess
from singularity.runtime.being import LiveBeing
from singularity.sanctum.extension import SanctumCore
from singularity.store.changes import Tracker
from singularity.store.directory import DirectoryStore
from singularity.store.postgres.step import Call
from singularity.store.postgres.store import Batch, PostgresStore

PHASES: tuple[tuple[type, str, str], ...] = (
    (LiveBeing, "save", "save (all of it)"),
    (DirectoryStore, "commit", "directory commit"),
    (PostgresStore, "_commit", "postgres commit"),
    (Tracker, "diff", "  tracker diff"),
    (Tracker, "take", "  tracker take"),
    (Call, "send", "  step sent"),
    (Call, "wait", "  step awaited"),
    (Batch, "run", "  step with riders"),
    (SanctumCore, "_compose", "sanctum section composed"),
)
"""The methods timed: (class, method, label)."""


class Phases:
    """CPU and wall seconds spent in each phase, per being, while one is being timed."""

    def __init__(self) -> None:
        self.timing: str | None = None
        self.spent: dict[str, dict[str, list[float]]] = {kind: {} for kind in KINDS}

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The phases' methods wrapped for as long as the block runs."""
        originals = [(owner, name, getattr(owner, name)) for owner, name, _ in PHASES]
        for (owner, name, label), (_, _, original) in zip(PHASES, originals, strict=True):
            setattr(owner, name, self._timed(original, label))
        try:
            yield
        finally:
            for owner, name, original in originals:
                setattr(owner, name, original)

    def _timed(self, method: Callable[..., Any], label: str) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.timing is None:
                return method(*args, **kwargs)
            cpu, wall = time.process_time(), time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent = self.spent[self.timing].setdefault(label, [0.0, 0.0])
                spent[0] += time.process_time() - cpu
                spent[1] += time.perf_counter() - wall

        return timed


def server_cpu(postmaster: int | None) -> float:
    """CPU seconds the server's processes have run (0 when they cannot be read)."""
    if postmaster is None:
        return 0.0
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
            if postmaster in (parent, int(pid)):
                total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    return total / 1e9


async def _run(
    root: Path,
    server: ServerProcess,
    kind: str,
    rounds: int,
    url: str | None,
    counted: tuple[Phases, str | None, int | None],
) -> dict[str, float]:
    """One run; its timed cycle's phases counted under `counted` (phases, the being's
    kind or None for none, the postmaster's pid)."""
    phases, timing, postmaster = counted
    directory = root / f"{kind}-{uuid.uuid4().hex[:8]}"
    runtime = boot_ours(directory, server, kind, rounds, url)
    try:
        server.add(script(WARM_UP_ROUNDS))
        await runtime.once()
        server.add(script(rounds))
        base = (server_cpu(postmaster), time.process_time(), time.perf_counter())
        phases.timing = timing
        try:
            report = await runtime.once()
        finally:
            phases.timing = None
        spent = {
            "wall": time.perf_counter() - base[2],
            "cpu": time.process_time() - base[1],
            "server_cpu": server_cpu(postmaster) - base[0],
        }
        if report.status != "completed" or len(report.actions) != rounds:
            raise RuntimeError(f"the run did not live the scenario: {report}")
    finally:
        await runtime.shutdown()
    shutil.rmtree(directory)
    return spent


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every run of both beings, interleaved; the figures."""
    with contextlib.ExitStack() as stack:
        url, postmaster = args.postgres_url, None
        if args.side == "postgres" and url is None:
            from singularity.testing.postgres import start_server

            started = start_server()
            stack.callback(started.stop)
            url = started.url
            pid_file = Path(started.data_dir) / "postmaster.pid"
            postmaster = int(pid_file.read_text().split()[0])
        root = Path(tempfile.mkdtemp(prefix="singularity-phases-", dir=args.dir))
        stack.callback(shutil.rmtree, root, True)
        environment = machine(root)
        phases = Phases()
        runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
        with ServerProcess() as server, phases.installed():
            for kind in KINDS:  # unrecorded: what a process does once
                asyncio.run(_run(root, server, kind, args.rounds, url, (phases, None, None)))
                server.served()
            for index in range(args.runs):
                for kind in KINDS if index % 2 == 0 else tuple(reversed(KINDS)):
                    counted = (phases, kind, postmaster)
                    found = asyncio.run(_run(root, server, kind, args.rounds, url, counted))
                    runs[kind].append(found)
                    served = server.served()
                    if served.count != WARM_UP_ROUNDS + 1 + args.rounds + 1:
                        raise RuntimeError(f"{served.count} model calls in a run")
    return {
        "benchmark": "rounds-phases",
        "command": f"python -m bench.rounds_phases --side {args.side} --rounds {args.rounds} "
        f"--runs {args.runs}",
        "machine": environment,
        "runs": runs,
        "phases_ms_per_cycle": {
            kind: {
                label: {"cpu": 1000 * cpu / args.runs, "wall": 1000 * wall / args.runs}
                for label, (cpu, wall) in spent.items()
            }
            for kind, spent in phases.spent.items()
        },
    }


def render(document: dict[str, Any]) -> str:
    """One row per figure: fresh, full, full minus fresh (ms per cycle)."""
    rows = []
    runs = document["runs"]
    for figure in ("wall", "cpu", "server_cpu"):
        for average in (statistics.median, statistics.fmean):
            fresh, full = (1000 * average(run[figure] for run in runs[kind]) for kind in KINDS)
            name = f"{figure} ({average.__name__})"
            rows.append([name, f"{fresh:.3f}", f"{full:.3f}", f"{full - fresh:+.3f}"])
    phases = document["phases_ms_per_cycle"]
    for _, _, label in PHASES:
        for figure in ("cpu", "wall"):
            if label not in phases["fresh"] and label not in phases["full"]:
                continue
            fresh, full = (phases[kind].get(label, {}).get(figure, 0.0) for kind in KINDS)
            rows.append(
                [f"{label} {figure}", f"{fresh:.3f}", f"{full:.3f}", f"{full - fresh:+.3f}"]
            )
    return table(["ms per timed cycle", "fresh", "full", "full - fresh"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rounds_phases", description=__doc__)
    parser.add_argument("--side", choices=("postgres", "directory"), default="postgres")
    parser.add_argument("--rounds", type=int, default=1, help="tool rounds of the timed cycle")
    parser.add_argument("--runs", type=int, default=30, help="runs of each being")
    parser.add_argument("--postgres-url", default=None, help="a server (default: start one)")
    parser.add_argument("--dir", type=Path, default=None, help="where the beings are written")
    args = parser.parse_args(argv)
    document = measure(args)
    print(render(document))
    print(f"\nwritten to {write_results('rounds-phases', document)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
