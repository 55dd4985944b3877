"""Benchmarks: each measures our path against a baseline run side by side in one process.

Figures are ratios against that baseline, never absolute targets; `bench/README.md` has the
commands and the latest figures. Results are written as JSON to `bench/results/`
(gitignored). This module holds what the benchmarks share: building an empty or a full
being, statistics, a description of the machine, and writing results.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from singularity.config import Settings, resolve
from singularity.domain.records import ChatMessage, MemoryEntry
from singularity.runtime.being import WINDOW_BYTES, WINDOW_MESSAGES, LiveBeing, open_being
from singularity.timestamps import now_text, system_clock

RESULTS = Path(__file__).parent / "results"
FULL_MEMORIES = 1000
MEMORY_TEXT_BYTES = 16 * 1024
# A full conversation window: WINDOW_MESSAGES messages whose compact JSON is just under
# WINDOW_BYTES, so the next message pushes the oldest one to the archive.
FULL_MESSAGE_BYTES = WINDOW_BYTES // WINDOW_MESSAGES - 64


def settings_for(state_dir: Path, **flags: object) -> Settings:
    """Settings of a bench being: defaults, this state directory, no environment, no file."""
    return resolve({"state_dir": str(state_dir), **flags}, environ={}, config_file=os.devnull)


def filler(size: int, seed: int) -> str:
    """`size` bytes of ASCII text that differ from one seed to the next."""
    unit = f"{seed:08d} lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    return (unit * (size // len(unit) + 1))[:size]


def full_memories() -> list[MemoryEntry]:
    """1000 memories of 16 KiB text each."""
    at = now_text(system_clock)
    return [
        MemoryEntry(
            id=f"00000000-0000-4000-8000-{index:012d}",
            kind="bench",
            text=filler(MEMORY_TEXT_BYTES, index),
            created_at=at,
            sources=[],
        )
        for index in range(FULL_MEMORIES)
    ]


def full_conversation() -> list[ChatMessage]:
    """A full window: 400 alternating user and assistant messages, 1 MiB in all."""
    messages: list[ChatMessage] = []
    for index in range(WINDOW_MESSAGES):
        content = filler(FULL_MESSAGE_BYTES - 32, index)
        if index % 2 == 0:
            messages.append({"role": "user", "content": content})
        else:
            messages.append({"role": "assistant", "content": content})
    return messages


def make_being(state_dir: Path, kind: str, **flags: object) -> LiveBeing:
    """Create and save a being: `empty` (just created) or `full` (memories and window full)."""
    being = open_being(settings_for(state_dir, **flags), resume=False)
    if kind == "full":
        being.state.mind.memories = full_memories()
        being.state.conversation = full_conversation()
    elif kind != "empty":
        raise ValueError(f"unknown being kind {kind!r}")
    being.state.status = "stopped"
    being.save()
    return being


def state_bytes(state_dir: Path) -> int:
    """The size of the saved `state.json`."""
    return (state_dir / "state.json").stat().st_size


def summary(samples_ns: Sequence[int]) -> dict[str, float]:
    """Median, p95, mean, min and max of timings, in milliseconds."""
    ms = sorted(sample / 1e6 for sample in samples_ns)
    return {
        "median_ms": statistics.median(ms),
        "p95_ms": percentile(ms, 95),
        "mean_ms": statistics.fmean(ms),
        "min_ms": ms[0],
        "max_ms": ms[-1],
        "samples": len(ms),
    }


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile of already sorted values."""
    rank = max(1, -(-len(sorted_values) * pct // 100))
    return sorted_values[int(rank) - 1]


def filesystem_of(path: Path) -> str:
    """The type of the file system holding `path` (from /proc/mounts), or `unknown`."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    best, kind = "", "unknown"
    resolved = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) >= 3 and resolved.startswith(fields[1]) and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind


def machine(data_dir: Path) -> dict[str, Any]:
    """What the figures were measured on."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(value, 2) for value in load],
        "data_dir_filesystem": filesystem_of(data_dir),
    }


def write_results(name: str, document: dict[str, Any]) -> Path:
    """Write a result document to `bench/results/<name>-<UTC time>.json`; its path."""
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = RESULTS / f"{name}-{stamp}.json"
    path.write_text(json.dumps(document, indent=2, default=_plain) + "\n")
    return path


def _plain(value: object) -> object:
    if isinstance(value, Decimal | Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__}")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table with right-aligned columns after the first."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = []
    for row in (headers, *rows):
        cells = [
            str(cell).ljust(width) if index == 0 else str(cell).rjust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells))
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
