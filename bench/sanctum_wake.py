"""What waking costs: a sanctum of 10,000 memory files against a small one, side by side.

    .venv/bin/python -m bench.sanctum_wake [--files 10000] [--runs 20] [--warmup 2] [--dir DIR]

Two sanctums are built with the same identity files: **small** (20 memory files) and
**large** (`--files` memory files: dated session notes and decisions, standing subjects in
30 kinds, raw files of which a tenth undistilled; about 1 KiB each). For each, interleaved
run by run:

- `cold`: the wake text built from the disk with nothing cached (walk `memory/` and
  `raw/`, read the identity files, the tending stamp, `pending.md`, the first 2000
  characters of every raw file) — a being's first wake, `singularity sanctum wake`;
- `rebuild`: the being's `Sanctum:` section rebuilt after a change elsewhere (an identity
  file, a cycle boundary): folder summaries are reused, each folder is only stat'ed;
- `after note`: rebuilt after a new session note, whose folder is read again;
- `cached`: the section when nothing changed, as before every model request (the stat
  checks that decide whether to rebuild);
- the prompt size of the section, in bytes and in tokens (4 bytes a token, the runtime's
  estimate);
- a naive baseline: the size of a prompt that carried every memory body, which is what a
  design without a map would send.

The figures are the large/small ratios. Writes `bench/results/sanctum_wake-<time>.json`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import machine, summary, table, write_results
from singularity.config import resolve
from singularity.domain import events
from singularity.domain.identity import identity_from
from singularity.domain.state import AgentState
from singularity.sanctum.extension import SanctumConfig, SanctumCore
from singularity.sanctum.wake import wake

KINDS = 30
BODY = "lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 18


@dataclass
class Host:
    """The being as the sanctum sees it, without a state directory."""

    state: AgentState
    events: list[dict[str, Any]] = field(default_factory=list)
    listeners: list[Callable[[dict[str, Any]], None]] = field(default_factory=list)

    def clock(self) -> datetime:
        return datetime(2026, 10, 7, tzinfo=UTC)

    def now(self) -> str:
        return "2026-10-07T00:00:00Z"

    def journal(self, record: events.ActivityEvent) -> None:
        event = events.encode(record)
        self.events.append(event)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build(root: Path, files: int) -> int:
    """Fill a sanctum born with seeds with `files` memory files; their total body bytes."""
    raw = files // 20
    sessions = files * 2 // 5
    decisions = files // 10
    standing = files - raw - sessions - decisions
    total = 0
    for number in range(sessions):
        day = f"2025-{1 + number // 28 % 12:02d}-{1 + number % 28:02d}"
        _write(root / "memory/sessions" / f"{day}-session-{number}.md", f"Session {number}. {BODY}")
    for number in range(decisions):
        _write(root / "memory/decisions" / f"2025-06-{1 + number % 28:02d}-d{number}.md", BODY)
    for number in range(standing):
        _write(
            root / f"memory/kind-{number % KINDS}" / f"subject-{number}.md", f"# {number}\n{BODY}"
        )
    for number in range(raw):
        status = "raw" if number % 10 == 0 else "distilled"
        text = f"---\nstatus: {status}\ndistilled_to: []\n---\n{BODY}"
        _write(root / "raw" / f"2025-05-{1 + number % 28:02d}-call-r{number}.md", text)
    _write(root / "memory/pending.md", "- Ask about the launch date.\n")
    for path in root.rglob("*"):
        if path.is_file() and path.parts[-2] != root.name:
            total += path.stat().st_size
    return total


def _core(state_dir: Path) -> SanctumCore:
    settings = resolve({"state_dir": str(state_dir), "agent_name": "Sage"}, environ={})
    state = AgentState.new(
        identity_from(settings), "m", settings.starting_balance, "2025-01-01T00:00:00Z"
    )
    core = SanctumCore(Host(state), SanctumConfig.from_settings(settings))
    core.open()
    return core


def _time(action: Callable[[], object]) -> int:
    started = time.perf_counter_ns()
    action()
    return time.perf_counter_ns() - started


def _measure(core: SanctumCore, phase: str, state_dir: Path, run: int) -> dict[str, int]:
    """One sample of each measure of a phase: reads only, or a new session note first."""
    store = core.store
    assert store is not None
    if phase == "write":
        note = state_dir / "sanctum/memory/sessions" / f"2026-10-07-run-{run}.md"
        note.write_text("a session\n")
        core.invalidate()
        return {"after note": _time(core.prompt_section)}
    timings = {"cold": _time(lambda: wake(store, "label"))}
    core.invalidate()
    timings["rebuild"] = _time(core.prompt_section)
    timings["cached"] = _time(core.prompt_section)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--dir", default=None)
    options = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sanctum-bench-", dir=options.dir))
    try:
        cores, bodies = {}, {}
        for name, count in (("small", 20), ("large", options.files)):
            (base / name).mkdir()
            cores[name] = _core(base / name)
            bodies[name] = build(base / name / "sanctum", count)
            cores[name].invalidate()
        time.sleep(2.1)  # past the "racy" window: folder summaries may be kept
        kinds = ("cold", "rebuild", "cached", "after note")
        samples: dict[str, dict[str, list[int]]] = {n: {k: [] for k in kinds} for n in cores}
        for phase in ("read", "write"):
            for run in range(options.warmup + options.runs):
                order = list(cores) if run % 2 == 0 else list(reversed(cores))
                for name in order:
                    for kind, value in _measure(cores[name], phase, base / name, run).items():
                        if run >= options.warmup:
                            samples[name][kind].append(value)
        report: dict[str, Any] = {"machine": machine(base), "files": options.files, "sanctums": {}}
        rows = []
        for name, core in cores.items():
            section = core.prompt_section().encode()
            stats = {kind: summary(samples[name][kind]) for kind in kinds}
            report["sanctums"][name] = {
                "section_bytes": len(section),
                "naive_bytes": len(section) + bodies[name],
                **stats,
            }
            rows.append(
                [
                    name,
                    str(20 if name == "small" else options.files),
                    f"{len(section):,}",
                    f"{len(section) // 4:,}",
                    f"{(len(section) + bodies[name]) // 4:,}",
                    *(f"{stats[kind]['median_ms']:.2f}" for kind in kinds),
                ]
            )
        small, large = report["sanctums"]["small"], report["sanctums"]["large"]
        ratios = {
            "section_bytes": large["section_bytes"] / small["section_bytes"],
            "naive_bytes": large["naive_bytes"] / small["naive_bytes"],
            **{kind: large[kind]["median_ms"] / small[kind]["median_ms"] for kind in kinds},
        }
        report["ratios_large_over_small"] = ratios
        rows.append(
            [
                "large/small",
                "",
                f"{ratios['section_bytes']:.2f}×",
                "",
                f"{ratios['naive_bytes']:.0f}×",
                *(f"{ratios[kind]:.1f}×" for kind in kinds),
            ]
        )
        headers = [
            "sanctum",
            "memory files",
            "section bytes",
            "tokens",
            "naive tokens",
            *(f"{kind} ms" for kind in kinds),
        ]
        print(table(headers, rows))
        print(f"results: {write_results('sanctum_wake', report)}")
    finally:
        for core in locals().get("cores", {}).values():
            core.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
