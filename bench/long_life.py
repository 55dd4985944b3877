"""The collector's full passes over one full being's long life, with and without the heap's
resettle between steps.

    .venv/bin/python -m bench.long_life [--cycles 1000] [--rounds 8] [--no-resettle]

A full being (1000 memories of 16 KiB, a full window) is booted (which freezes what boot
loaded, `runtime/heap.py`) and lives `--cycles` cycles of `--rounds` remember calls each
against the scripted server in its own process (`bench/scripted_process.py`). Every
generation-2 collection is timed through `gc.callbacks`, and marked as the collector's
own (inside a step, where a model round may be waiting on it) or as `heap.resettle`'s
(between steps). `--no-resettle` makes `heap.resettle` do nothing: the runtime as it was,
freezing only at boot. The unfrozen tracked objects (`gc.get_objects`) are counted at
the end of every tenth cycle. Prints a summary and writes the figures to
`bench/results/long-life-<time>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import machine, make_being, settings_for, write_results
from bench.rounds import script
from bench.scripted_process import ServerProcess
from singularity.runtime import heap
from singularity.runtime.loop.lifecycle import Runtime


class Passes:
    """The generation-2 collections seen through `gc.callbacks`, each with the cycle it
    came in, its milliseconds and whether `heap.resettle` made it."""

    def __init__(self) -> None:
        self.cycle = 0
        self.resettling = False
        self.started = 0.0
        self.seen: list[dict[str, Any]] = []

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self.started = time.perf_counter()
            return
        self.seen.append(
            {
                "cycle": self.cycle,
                "ms": (time.perf_counter() - self.started) * 1000,
                "by": "resettle" if self.resettling else "collector",
                "collected": info["collected"],
            }
        )


async def live(directory: Path, cycles: int, rounds: int, resettle: bool) -> dict[str, Any]:
    """One full being's life of `cycles` cycles; its passes and unfrozen counts."""
    state_dir, workspace = directory / "state", directory / "workspace"
    workspace.mkdir()
    flags: dict[str, object] = {
        "workspace": str(workspace),
        "max_tool_rounds": str(rounds + 1),
        "agent_name": "Bench",
        "specialty": "benchmarks",
        "agent_id": f"bench-{uuid.uuid4().hex[:12]}",
    }
    passes = Passes()
    resettled = heap.resettle

    def watched(bound: int = heap.BOUND) -> bool:
        if not resettle:
            return False
        passes.resettling = True
        try:
            return resettled(bound)
        finally:
            passes.resettling = False

    heap.resettle = watched
    unfrozen: list[dict[str, int]] = []
    with ServerProcess() as server:
        flags["brama_url"] = server.url
        make_being(state_dir, "full", **flags).close()
        runtime = Runtime.boot(settings_for(state_dir, resume=True, **flags))
        gc.callbacks.append(passes)
        started = time.perf_counter()
        try:
            for cycle in range(1, cycles + 1):
                passes.cycle = cycle
                server.add(script(rounds))
                report = await runtime.once()
                if report.status != "completed" or len(report.actions) != rounds:
                    raise RuntimeError(f"the being did not live the scenario: {report}")
                if cycle % 10 == 0:
                    unfrozen.append({"cycle": cycle, "unfrozen": len(gc.get_objects())})
        finally:
            gc.callbacks.remove(passes)
            heap.resettle = resettled
            await runtime.shutdown()
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "passes": passes.seen, "unfrozen": unfrozen}


def summary(document: dict[str, Any]) -> str:
    """Each kind of pass's count and milliseconds, in the life's first and last tenth."""
    cycles = document["cycles"]
    lines = [f"{cycles} cycles of {document['rounds']} rounds in {document['seconds']:.1f} s"]
    for by in ("collector", "resettle"):
        seen = [p for p in document["passes"] if p["by"] == by]
        if not seen:
            lines.append(f"{by}: no generation-2 pass")
            continue
        ms = [p["ms"] for p in seen]
        lines.append(
            f"{by}: {len(seen)} passes, {min(ms):.1f}-{max(ms):.1f} ms, median "
            f"{statistics.median(ms):.1f}; first {[round(m, 1) for m in ms[:3]]}, "
            f"last {[round(m, 1) for m in ms[-3:]]}"
        )
    counts = [u["unfrozen"] for u in document["unfrozen"]]
    if counts:
        lines.append(
            f"unfrozen tracked objects: {counts[0]} at cycle 10, max {max(counts)}, "
            f"{counts[-1]} at the end"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Live the life, print the summary, write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--no-resettle", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        before = machine(Path(directory))
        lived = asyncio.run(live(Path(directory), args.cycles, args.rounds, not args.no_resettle))
    document = {
        "machine": before,
        "load_after": list(os.getloadavg()),
        "cycles": args.cycles,
        "rounds": args.rounds,
        "resettle": not args.no_resettle,
        "bound": heap.BOUND,
        **lived,
    }
    print(summary(document))
    print(write_results("long-life", document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
