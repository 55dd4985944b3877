"""What one tool call costs to persist: our durable path against its floor, side by side.

    .venv/bin/python -m bench.persistence [--calls 100] [--warmup 5] [--dir DIR]

A tool call changes the state (an action record and a tool message, as
`runtime/loop/tool_call.py` does) and then persists it: the journal line and the state. For an
empty being and for a full one (1000 memories of 16 KiB, a full conversation window of 400
messages / 1 MiB), each call is measured beside its floor, alternating which goes first:

- durable (ours): `LiveBeing.journal` then `LiveBeing.save`: one step of the directory
  store (its record appended to `state.redo` and fdatasynced, then the journal line and what
  left the window written after it), and a checkpoint when the log has grown past its bound;
- floor: one `write` + `fdatasync` of the very bytes the step appended to `state.redo`
  (the latest step's), to another file in the same directory: the same bytes with the same
  system calls, which no durable path can go under. The ratio is ours over this;
- naive write, for orientation only (it is not durable, so not a floor), measured on the
  same being after the others: the whole state JSON written with a plain
  `open(path, "w").write(...)` and the journal line with `open(path, "a").write(...)`, no
  fsync, no rename: what an agent that "just writes a file" does.

Prints a table and writes the figures to `bench/results/persistence-<time>.json`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import machine, make_being, state_bytes, summary, table, write_results
from singularity.domain import events
from singularity.domain.records import ActionRecord
from singularity.jsoncodec import compact
from singularity.runtime.being import LiveBeing
from singularity.store.redo import REDO_FILE

TOOL = "singularity_memory_remember"


def _tool_call(being: LiveBeing, index: int) -> events.ToolFinished:
    """Change the state as one tool call does; the journal event it writes."""
    state = being.state
    at = being.now()
    state.record_action(ActionRecord(cycle=state.cycle, tool=TOOL, status="success", at=at))
    content = compact({"content": {"memory_id": f"m-{index}"}, "status": "success"})
    state.conversation.append(
        {"role": "tool", "content": content, "tool_call_id": f"call_{index}", "name": TOOL}
    )
    return events.ToolFinished(at, state.cycle, TOOL, "success")


def _durable(being: LiveBeing, event: events.ToolFinished) -> int:
    started = time.perf_counter_ns()
    being.journal(event)
    being.save()
    return time.perf_counter_ns() - started


class Floor:
    """The floor of a being's steps: its latest `state.redo` record, appended and synced."""

    def __init__(self, state_dir: Path, path: Path) -> None:
        self.log = state_dir / REDO_FILE
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.log_size = 0
        self.record = b""

    def note(self) -> None:
        """Keep the record the step just appended (a checkpoint starts the log afresh)."""
        size = self.log.stat().st_size
        if size > self.log_size:
            with open(self.log, "rb") as log:
                log.seek(self.log_size)
                self.record = log.read()
        self.log_size = size

    def measure(self) -> int:
        started = time.perf_counter_ns()
        os.write(self.fd, self.record)
        os.fdatasync(self.fd)
        return time.perf_counter_ns() - started

    def close(self) -> None:
        os.close(self.fd)


def _naive(being: LiveBeing, event: events.ToolFinished, directory: Path) -> int:
    started = time.perf_counter_ns()
    with open(directory / "activity.jsonl", "a") as journal:
        journal.write(compact(events.encode(event)) + "\n")
    with open(directory / "state.json", "w") as state:
        state.write(being.state.model_dump_json(indent=2))
    return time.perf_counter_ns() - started


def _encode(being: LiveBeing) -> int:
    started = time.perf_counter_ns()
    being.state.to_json()
    return time.perf_counter_ns() - started


def measure(kind: str, root: Path, calls: int, warmup: int) -> dict[str, Any]:
    """Time `calls` tool calls' persistence, and its floor, for one kind of being."""
    state_dir, naive_dir = root / f"{kind}-being", root / f"{kind}-naive"
    naive_dir.mkdir()
    being = make_being(state_dir, kind)
    floor = Floor(state_dir, root / f"{kind}-floor")
    floor.note()
    try:
        durable_ns: list[int] = []
        floor_ns: list[int] = []
        record_bytes: list[int] = []
        for index in range(warmup + calls):
            event = _tool_call(being, index)
            if index % 2:
                below = floor.measure()
                durable = _durable(being, event)
                floor.note()
            else:
                durable = _durable(being, event)
                floor.note()
                below = floor.measure()
            if index >= warmup:
                durable_ns.append(durable)
                floor_ns.append(below)
                record_bytes.append(len(floor.record))
        size = state_bytes(state_dir)
        # Afterwards, not interleaved: the naive write leaves megabytes unsynced, which the
        # file system would flush in the next sync of the directory's disk, ours or the floor's.
        naive_ns: list[int] = []
        encode_ns: list[int] = []
        for index in range(warmup + calls, warmup + 2 * calls):
            event = _tool_call(being, index)
            naive_ns.append(_naive(being, event, naive_dir))
            encode_ns.append(_encode(being))
    finally:
        floor.close()
        being.close()
    durable_stats, floor_stats = summary(durable_ns), summary(floor_ns)
    naive_stats = summary(naive_ns)
    return {
        "being": kind,
        "state_json_bytes": size,
        "memories": len(being.state.mind.memories),
        "window_messages": len(being.state.conversation),
        "record_bytes_median": sorted(record_bytes)[len(record_bytes) // 2],
        "durable": durable_stats,
        "floor": floor_stats,
        "naive": naive_stats,
        "json_encode": summary(encode_ns),
        "ratio_median": durable_stats["median_ms"] / floor_stats["median_ms"],
        "ratio_p95": durable_stats["p95_ms"] / floor_stats["p95_ms"],
        "naive_ratio_median": durable_stats["median_ms"] / naive_stats["median_ms"],
    }


def _size(size: int) -> str:
    return f"{size / 1024:.1f} KiB" if size < 1 << 20 else f"{size / (1 << 20):.1f} MiB"


def render(results: list[dict[str, Any]]) -> str:
    """The table printed at the end."""
    headers = [
        "being",
        "state.json",
        "record",
        "durable median",
        "durable p95",
        "floor median",
        "floor p95",
        "÷ floor (median)",
        "÷ floor (p95)",
        "full ÷ fresh",
        "naive median",
        "JSON encode median",
    ]
    fresh = results[0]["durable"]["median_ms"]
    rows = [
        [
            r["being"],
            _size(r["state_json_bytes"]),
            f"{r['record_bytes_median']} B",
            f"{r['durable']['median_ms']:.2f} ms",
            f"{r['durable']['p95_ms']:.2f} ms",
            f"{r['floor']['median_ms']:.2f} ms",
            f"{r['floor']['p95_ms']:.2f} ms",
            f"{r['ratio_median']:.2f}x",
            f"{r['ratio_p95']:.2f}x",
            "—" if index == 0 else f"{r['durable']['median_ms'] / fresh:.2f}x",
            f"{r['naive']['median_ms']:.2f} ms",
            f"{r['json_encode']['median_ms']:.2f} ms",
        ]
        for index, r in enumerate(results)
    ]
    return table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.persistence", description=__doc__)
    parser.add_argument("--calls", type=int, default=100, help="measured calls per being")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured calls first")
    parser.add_argument("--dir", type=Path, default=None, help="where the beings are written")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="singularity-bench-", dir=args.dir))
    try:
        environment = machine(root)
        results = [measure(kind, root, args.calls, args.warmup) for kind in ("empty", "full")]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(render(results))
    path = write_results(
        "persistence",
        {
            "benchmark": "persistence",
            "command": f"python -m bench.persistence --calls {args.calls} --warmup {args.warmup}",
            "machine": environment,
            "results": results,
        },
    )
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
