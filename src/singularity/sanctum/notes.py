"""Runtime-written session notes: no cycle ends without a trace in `memory/sessions/`.

`NoteKeeper` follows the journal (the events at open, then every event as it is
journaled) and keeps a digest of each cycle that started after the sanctum was
initialised and has no session note yet. A cycle counts as noted when the being wrote a
file under `memory/sessions/` during it (`sanctum_written`) or the runtime wrote one
(`session_note_auto`). For the others the runtime writes a minimal note itself, from
the same events: tools used, model calls, cost, revenue and warnings. The runtime's
notes of one day share one file, `memory/sessions/YYYY-MM-DD-runtime.md` (marked
`auto: true`), one section a cycle, continued in `…-runtime-2.md` and on past 64 KiB, so
a being living a cycle every few seconds leaves a few files a day, not thousands.
A cycle in which no model round happened needs no note (decision 25).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from singularity.domain import events
from singularity.money import ZERO, add, render_money
from singularity.sanctum.names import SESSIONS_PREFIX

Event = dict[str, Any]
MAX_WARNINGS = 10
MAX_WARNING_CHARS = 200


@dataclass
class CycleDigest:
    """What one cycle did, as its journal events tell it."""

    cycle: int
    started_at: str
    tools: Counter[tuple[str, str]] = field(default_factory=Counter)
    model_calls: int = 0
    tokens: int = 0
    cost: Decimal = ZERO
    revenue: Decimal = ZERO
    warnings: list[str] = field(default_factory=list)

    @property
    def day(self) -> str:
        """The cycle's UTC date, `YYYY-MM-DD`."""
        return self.started_at[:10]


@dataclass
class NoteKeeper:
    """Digests of the cycles that still need a session note."""

    active: bool = False
    """Whether the sanctum was initialised: cycles before that are never noted."""
    open: dict[int, CycleDigest] = field(default_factory=dict)

    def observe(self, event: Event) -> None:
        """Take one journal event into account (one it cannot read, it passes over)."""
        record = events.readable(event)
        if isinstance(record, events.SanctumInitialized):
            self.active = True
            return
        if not self.active or record is None or not hasattr(record, "cycle"):
            return
        if isinstance(record, events.CycleStarted):
            self.open[record.cycle] = CycleDigest(record.cycle, record.at)
            return
        digest = self.open.get(record.cycle)
        if digest is None:
            return
        if isinstance(record, events.SessionNoteAuto) or (
            isinstance(record, events.SanctumWritten) and record.path.startswith(SESSIONS_PREFIX)
        ):
            del self.open[record.cycle]
        elif isinstance(record, events.ToolFinished):
            digest.tools[(record.tool, record.status)] += 1
        elif isinstance(record, events.ModelCompleted):
            digest.model_calls += 1
            digest.tokens += record.usage.total_tokens
        elif isinstance(record, events.CostDebited):
            digest.cost = add(digest.cost, record.amount)
        elif isinstance(record, events.RevenueCredited):
            digest.revenue = add(digest.revenue, record.amount)
        elif isinstance(record, events.Warned) and len(digest.warnings) < MAX_WARNINGS:
            # One line a bullet: a section's end is found by its lines (`torn_at`).
            digest.warnings.append(" ".join(record.message[:MAX_WARNING_CHARS].splitlines()))

    def due(self, through: int) -> list[CycleDigest]:
        """The unnoted cycles up to and including `through` that had a model round, oldest
        first; the others are forgotten: a cycle in which the gateway never answered (it was
        down, say) leaves no note."""
        ended = [cycle for cycle in sorted(self.open) if cycle <= through]
        for cycle in ended:
            if not self.open[cycle].model_calls:
                del self.open[cycle]
        return [self.open[cycle] for cycle in ended if cycle in self.open]

    def settled(self, cycle: int) -> None:
        """Forget a cycle (its note exists)."""
        self.open.pop(cycle, None)


def _tools_line(digest: CycleDigest) -> str:
    by_tool: dict[str, Counter[str]] = {}
    for (tool, status), count in sorted(digest.tools.items()):
        by_tool.setdefault(tool, Counter())[status] += count
    parts = []
    for tool, statuses in by_tool.items():
        total = sum(statuses.values())
        others = [f"{status} {n}" for status, n in sorted(statuses.items()) if status != "success"]
        parts.append(f"{tool} ×{total}" + (f" ({', '.join(others)})" if others else ""))
    return ", ".join(parts) or "none"


def day_header(day: str) -> str:
    """The opening of a day's file of runtime notes."""
    return (
        f"---\nauto: true\nday: {day}\n---\n# Cycles of {day}\n\n"
        "Written by the runtime, a section for each cycle that ended without a session "
        "note.\n"
    )


def section_heading(cycle: int) -> str:
    """The heading line of a cycle's section (how a rerun finds it already written)."""
    return f"## Cycle {cycle} "


def note_section(digest: CycleDigest, ended: str) -> str:
    """The section the runtime writes for a cycle that ended without a note."""
    warnings = "; ".join(digest.warnings) or "none"
    return (
        f"\n{section_heading(digest.cycle)}({digest.started_at}, {ended})\n\n"
        f"- Tools used: {_tools_line(digest)}\n"
        f"- Model calls: {digest.model_calls} ({digest.tokens} tokens); "
        f"cost {render_money(digest.cost)} USD; revenue {render_money(digest.revenue)} USD\n"
        f"- Warnings: {warnings}\n"
    )


WARNINGS_LINE = "\n- Warnings: "
"""The last line of every section: a section without it was cut short."""


def holds_note(existing: str, cycle: int) -> bool:
    """Whether a file of runtime notes holds the cycle's section."""
    return f"\n{section_heading(cycle)}(" in existing


def torn_at(existing: str) -> int | None:
    """Where a section that an append left unfinished begins (a crash of the machine between
    its write and its sync): its last line lacks its newline, or the last section lacks its
    `Warnings` line. None when the file ends whole.

    Sections are only ever appended, so only the last one can be unfinished.
    """
    last = existing.rfind("\n\n## Cycle ")
    if last < 0:
        return None  # the header alone, written whole with the file's first section
    if existing.endswith("\n") and WARNINGS_LINE in existing[last + 1 :]:
        return None
    return last + 1


def with_note(existing: str | None, digest: CycleDigest, ended: str) -> str | None:
    """The day's file with the cycle's section added; None when it holds that section."""
    if existing is not None and holds_note(existing, digest.cycle):
        return None
    return (existing or day_header(digest.day)) + note_section(digest, ended)
