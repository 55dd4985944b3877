"""What the console keeps of a being's activity journal, read incrementally.

The journal is read from the byte offset where the last read stopped, so a page that
refreshes every second costs only the new events. Only metadata is kept: the private
journal's events carry ids and moods, never text, and nothing else is read of it.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from singularity.domain import events
from singularity.money import parse_money
from singularity.storage.activity import Event

RECENT_EVENTS = 200
ROUND_EVENTS = 1000
TRANSCRIPT_EVENTS: frozenset[type[events.ActivityEvent]] = frozenset(
    {events.CycleStarted, events.CycleFinished, events.ModelCompleted, events.CostDebited}
)
# Ledger entries and the sign they move `remaining` by.
LEDGER_SIGNS: dict[type[events.ActivityEvent], int] = {
    events.CostDebited: -1,
    events.RevenueCredited: 1,
    events.OperatorCredited: 1,
    events.ChildFunded: -1,
    events.ChildRefunded: 1,
}
SANCTUM_WRITERS: dict[type[events.ActivityEvent], str] = {
    events.SanctumWritten: "being",
    events.OperatorSanctumWritten: "operator",
}


@dataclass(frozen=True)
class LedgerPoint:
    """One ledger entry: when, what kind, and how it moved the balance."""

    at: str
    kind: str
    delta: Decimal


@dataclass(frozen=True)
class Change:
    """One change to a sanctum file: who made it, when, its size."""

    at: str
    cycle: int | None
    by: str
    size: int


@dataclass
class JournalMetadata:
    """Counts of the private journal's activity; never its text."""

    entries: int = 0
    redacted: int = 0
    recalls: int = 0
    promoted: int = 0
    purged: int = 0
    moods: Counter[str] = field(default_factory=Counter)
    last_entry_at: str | None = None


@dataclass
class Follower:
    """The journal of one being as far as it was read."""

    offset: int = 0
    paused: bool = False
    applied: set[str] = field(default_factory=set)
    proposals: dict[str, dict[str, Any]] = field(default_factory=dict)
    ledger: list[LedgerPoint] = field(default_factory=list)
    recent: deque[Event] = field(default_factory=lambda: deque(maxlen=RECENT_EVENTS))
    rounds: deque[Event] = field(default_factory=lambda: deque(maxlen=ROUND_EVENTS))
    """The newest events a transcript reads (cycle starts and ends, usage, costs)."""
    journal: JournalMetadata = field(default_factory=JournalMetadata)
    sanctum: dict[str, list[Change]] = field(default_factory=dict)
    last_event: Event | None = None
    count: int = 0

    def add(self, events: Iterable[Event], offset: int) -> None:
        """Follow more events; `offset` is where the read stopped."""
        for event in events:
            self._observe(event)
        self.offset = offset

    def _observe(self, event: Event) -> None:
        kind = events.kind_of(event)
        self.count += 1
        self.last_event = event
        self.recent.append(event)
        if kind in TRANSCRIPT_EVENTS:
            self.rounds.append(event)
        request_id = event.get("request_id")
        if isinstance(request_id, str):
            self.applied.add(request_id)
        if kind is None:
            return
        if kind in LEDGER_SIGNS:
            try:
                amount = parse_money(event.get("amount"))
            except ValueError:
                return
            point = LedgerPoint(str(event.get("at")), kind.type, amount * LEDGER_SIGNS[kind])
            self.ledger.append(point)
        elif kind is events.OperatorPaused:
            self.paused = True
        elif kind is events.OperatorResumed:
            self.paused = False
        elif kind is events.SelfEditProposed:
            self.proposals[str(event.get("proposal_id"))] = event
        elif kind is events.SelfEditDecided:
            self.proposals.pop(str(event.get("proposal_id")), None)
        elif kind in SANCTUM_WRITERS:
            by = SANCTUM_WRITERS[kind]
            cycle = event.get("cycle")
            self.sanctum.setdefault(str(event.get("path")), []).append(
                Change(
                    str(event.get("at")),
                    cycle if isinstance(cycle, int) else None,
                    by,
                    int(event.get("bytes", 0)),
                )
            )
        else:
            self._journal(kind, event)

    def _journal(self, kind: type[events.ActivityEvent], event: Event) -> None:
        meta = self.journal
        if kind is events.JournalEntryAdded:
            meta.entries += 1
            meta.last_entry_at = str(event.get("at"))
            if event.get("redacted"):
                meta.redacted += 1
            mood = event.get("mood")
            if isinstance(mood, str) and mood:
                meta.moods[mood] += 1
        elif kind is events.JournalRecalled:
            meta.recalls += 1
        elif kind is events.JournalPromoted:
            meta.promoted += 1
        elif kind is events.JournalPurged:
            meta.purged += int(event.get("count", 0))
