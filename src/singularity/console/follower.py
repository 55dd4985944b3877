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
    proposals: dict[str, events.SelfEditProposed] = field(default_factory=dict)
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
        self.count += 1
        self.last_event = event
        self.recent.append(event)
        request_id = event.get("request_id")
        if isinstance(request_id, str):
            self.applied.add(request_id)
        named = events.kind_of(event)
        if named in LEDGER_SIGNS:
            # Read as the ledger reads it: an older line without every field still counts.
            try:
                amount = parse_money(event.get("amount"))
            except ValueError:
                return
            self.ledger.append(
                LedgerPoint(str(event.get("at")), named.type, amount * LEDGER_SIGNS[named])
            )
        record = events.readable(event)
        if record is None:
            return
        kind = type(record)
        if kind in TRANSCRIPT_EVENTS:
            self.rounds.append(event)
        if isinstance(record, events.OperatorPaused):
            self.paused = True
        elif isinstance(record, events.OperatorResumed):
            self.paused = False
        elif isinstance(record, events.SelfEditProposed):
            self.proposals[record.proposal_id] = record
        elif isinstance(record, events.SelfEditDecided):
            self.proposals.pop(record.proposal_id, None)
        elif isinstance(record, events.SanctumWritten | events.OperatorSanctumWritten):
            by = SANCTUM_WRITERS[kind]
            change = Change(record.at, record.cycle, by, record.bytes)
            self.sanctum.setdefault(record.path, []).append(change)
        else:
            self._journal(record)

    def _journal(self, record: events.ActivityEvent) -> None:
        meta = self.journal
        if isinstance(record, events.JournalEntryAdded):
            meta.entries += 1
            meta.last_entry_at = record.at
            if record.redacted:
                meta.redacted += 1
            if record.mood:
                meta.moods[record.mood] += 1
        elif isinstance(record, events.JournalRecalled):
            meta.recalls += 1
        elif isinstance(record, events.JournalPromoted):
            meta.promoted += 1
        elif isinstance(record, events.JournalPurged):
            meta.purged += record.count
