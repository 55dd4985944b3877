"""What starting the command line costs: `singularity --help` against `import httpx`.

    .venv/bin/python -m bench.start [--runs 40] [--warmup 3]

Each run starts, as fresh processes, the commands below one after the other (the order
alternating from run to run) and takes the CPU time (user + system) each process used,
as the kernel accounts it (`os.wait4`):

- baseline: `python -c "import httpx"`, the price of one HTTP client library;
- `singularity --help` and `singularity --version`, through the installed console script;
- `python -c pass`, the interpreter alone, for orientation.

The figures are each command's median CPU over the baseline's. Writes
`bench/results/start-<time>.json`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import machine, summary, table, write_results

PYTHON = sys.executable
SINGULARITY = str(Path(PYTHON).parent / "singularity")
BASELINE = "import httpx"
COMMANDS = {
    BASELINE: [PYTHON, "-c", "import httpx"],
    "singularity --help": [SINGULARITY, "--help"],
    "singularity --version": [SINGULARITY, "--version"],
    "python -c pass": [PYTHON, "-c", "pass"],
}


def _cpu_ns(argv: list[str]) -> tuple[int, int]:
    """The CPU time (user + system) and the wall time of one run of `argv`, in ns."""
    start = time.perf_counter_ns()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter_ns() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited with {process.returncode}")
    return int((usage.ru_utime + usage.ru_stime) * 1e9), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    options = parser.parse_args()
    cpu: dict[str, list[int]] = {name: [] for name in COMMANDS}
    wall: dict[str, list[int]] = {name: [] for name in COMMANDS}
    report: dict[str, Any] = {"machine": machine(Path.cwd()), "runs": options.runs}
    for run in range(options.warmup + options.runs):
        order = list(COMMANDS) if run % 2 == 0 else list(reversed(COMMANDS))
        for name in order:
            used, elapsed = _cpu_ns(COMMANDS[name])
            if run >= options.warmup:
                cpu[name].append(used)
                wall[name].append(elapsed)
    stats = {name: {"cpu": summary(cpu[name]), "wall": summary(wall[name])} for name in COMMANDS}
    floor = stats[BASELINE]["cpu"]["median_ms"]
    rows = [
        [
            name,
            f"{stats[name]['cpu']['median_ms']:.1f} ms",
            f"{stats[name]['cpu']['p95_ms']:.1f} ms",
            f"{stats[name]['wall']['median_ms']:.1f} ms",
            f"{stats[name]['cpu']['median_ms'] / floor:.2f}x",
        ]
        for name in COMMANDS
    ]
    report["commands"] = {
        name: {"argv": COMMANDS[name], **stats[name], "cpu_ns": cpu[name], "wall_ns": wall[name]}
        for name in COMMANDS
    }
    print(table(["command", "CPU median", "CPU p95", "wall median", "CPU / import httpx"], rows))
    print(f"results: {write_results('start', report)}")


if __name__ == "__main__":
    main()
