"""The events `activity.jsonl` records, as typed records with one encoder and one decoder.

Each event is a frozen dataclass whose fields are its JSON keys in the spec's order (§5.5;
our added fields after the spec's): `encode` writes `type` first, then each field, money
(`Decimal`) as its plain decimal string; a field marked `OMITTED_WHEN_NONE` is left out
while it is None. `decode` reads a journal line's object back into its record. A field
the runtime derives (`CostDebited.amount`, `Usage.total_tokens`) is computed, never given.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar

from singularity.money import add, parse_money, render_money

Event = dict[str, Any]
"""An event as the journal holds it: a JSON object, `type` first."""
OMITTED_WHEN_NONE = {"omitted_when_none": True}


@dataclass(frozen=True)
class ActivityEvent:
    """An event of the activity journal; `type` names it on its line."""

    type: ClassVar[str]


def encode(event: ActivityEvent) -> Event:
    """The event's JSON object: `type`, then its fields in order."""
    return {"type": event.type, **_fields(event)}


def _fields(record: Any) -> Event:
    out: Event = {}
    for each in dataclasses.fields(record):
        value = getattr(record, each.name)
        if value is None and each.metadata.get("omitted_when_none"):
            continue
        if isinstance(value, Decimal):
            value = render_money(value)
        elif dataclasses.is_dataclass(value):
            value = _fields(value)
        out[each.name] = value
    return out


class EventShapeError(ValueError):
    """A journaled event that does not have the shape of its type."""


def decode(event: Event) -> ActivityEvent | None:
    """The record of a journaled event; None for a type this version does not know.

    A known type missing a field, or with a field not of its type (money that is not money,
    a cycle that is not an integer), is an `EventShapeError` saying which.
    """
    kind = kind_of(event)
    if kind is None:
        return None
    return kind(**_arguments(kind, event))


def readable(event: Event) -> ActivityEvent | None:
    """The record of a journaled event; None for a type unknown or an event damaged.

    For the readers that show or count what a journal holds and pass over what they cannot
    read (a line an older or later version wrote differently, a hand-edited one).
    """
    try:
        return decode(event)
    except EventShapeError:
        return None


def kind_of(event: Event) -> type[ActivityEvent] | None:
    """The record type a journaled event names, its fields unread; None for one unknown.

    For the readers that tolerate a damaged journal and say themselves what is wrong in it.
    """
    return RECORDS.get(str(event.get("type")))


def _arguments(kind: type[ActivityEvent], event: Event) -> dict[str, Any]:
    hints = _hints(kind)
    arguments: dict[str, Any] = {}
    for each in dataclasses.fields(kind):
        if not each.init:
            continue
        if each.name not in event:
            if each.default is dataclasses.MISSING:
                raise EventShapeError(f"{kind.type} event has no {each.name}")
            continue
        value = event[each.name]
        hint = hints[each.name]
        if hint is Decimal:
            try:
                value = parse_money(value)
            except ValueError:
                raise EventShapeError(f"{kind.type} event has a bad {each.name}") from None
        elif hint is Usage:
            counts = (
                [value.get(name, 0) for name in USAGE_COUNTS] if isinstance(value, dict) else []
            )
            if len(counts) != len(USAGE_COUNTS) or not all(map(_is_count, counts)):
                raise EventShapeError(f"{kind.type} event has a bad {each.name}")
            value = Usage(*counts)
        elif not fits(value, hint):
            raise EventShapeError(f"{kind.type} event has a bad {each.name}")
        arguments[each.name] = value
    return arguments


def fits(value: object, hint: Any) -> bool:
    """Whether a JSON value has the type a record's field is annotated with."""
    if hint is Any:
        return True
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (str, bool):
        return isinstance(value, hint)
    origin, parts = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(fits(item, parts[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(fits(item, parts[1]) for item in value.values())
    if type(None) in parts:  # `X | None`
        return value is None or any(fits(value, part) for part in parts if part is not type(None))
    raise TypeError(f"an event field annotated {hint!r} cannot be checked")


USAGE_COUNTS = ("prompt_tokens", "completion_tokens")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _hints(kind: type[ActivityEvent]) -> dict[str, Any]:
    hints = _HINTS.get(kind)
    if hints is None:
        hints = _HINTS[kind] = typing.get_type_hints(kind)
    return hints


_HINTS: dict[type[ActivityEvent], dict[str, Any]] = {}


@dataclass(frozen=True)
class Started(ActivityEvent):
    """Boot finished."""

    type: ClassVar[str] = "started"
    at: str


@dataclass(frozen=True)
class CycleStarted(ActivityEvent):
    """A cycle began."""

    type: ClassVar[str] = "cycle_started"
    at: str
    cycle: int


@dataclass(frozen=True)
class Usage:
    """A completion's token counts; the total is recomputed, never taken from the gateway."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_tokens", self.prompt_tokens + self.completion_tokens)


@dataclass(frozen=True)
class ModelCompleted(ActivityEvent):
    """A completion arrived; `model` is the one that answered, when the gateway said."""

    type: ClassVar[str] = "model_completed"
    at: str
    cycle: int
    usage: Usage
    model: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True)
class CostReserved(ActivityEvent):
    """The worst-case cost of a model call was reserved before the call (decision 16)."""

    type: ClassVar[str] = "cost_reserved"
    at: str
    cycle: int
    operation_id: str
    api: Decimal
    instance: Decimal


@dataclass(frozen=True)
class CostReleased(ActivityEvent):
    """A reserved model call failed and cost nothing."""

    type: ClassVar[str] = "cost_released"
    at: str
    cycle: int
    operation_id: str


@dataclass(frozen=True)
class CostDebited(ActivityEvent):
    """A completion's cost was debited: the spec's `amount` (api + instance) first, then the
    operation's parts."""

    type: ClassVar[str] = "cost_debited"
    at: str
    cycle: int
    amount: Decimal = field(init=False)
    operation_id: str
    api: Decimal
    instance: Decimal
    tokens: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "amount", add(self.api, self.instance))


@dataclass(frozen=True)
class ToolFinished(ActivityEvent):
    """A tool call finished."""

    type: ClassVar[str] = "tool_finished"
    at: str
    cycle: int
    tool: str
    status: str


@dataclass(frozen=True)
class OutputBounded(ActivityEvent):
    """A tool result was withheld (`rejection`) or passed with values replaced; journaled
    just before its `tool_finished`, so a reader knows what the model was shown."""

    type: ClassVar[str] = "output_bounded"
    at: str
    cycle: int
    tool: str
    mode: str
    rejection: str | None
    redactions: dict[str, int]


@dataclass(frozen=True)
class RevenueCredited(ActivityEvent):
    """Trusted revenue was credited (`operation_id`: its ledger entry)."""

    type: ClassVar[str] = "revenue_credited"
    at: str
    cycle: int
    amount: Decimal
    source: str
    operation_id: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True)
class MindImported(ActivityEvent):
    """An import was accepted."""

    type: ClassVar[str] = "mind_imported"
    at: str
    source_kind: str
    source_id: str
    imported: int
    attributed: int
    unchanged: int


@dataclass(frozen=True)
class Warned(ActivityEvent):
    """A tolerated problem (type `warning`)."""

    type: ClassVar[str] = "warning"
    at: str
    cycle: int
    message: str


@dataclass(frozen=True)
class Stopped(ActivityEvent):
    """The runtime shut down."""

    type: ClassVar[str] = "stopped"
    at: str
    cycle: int
    status: str


@dataclass(frozen=True)
class ChildFunded(ActivityEvent):
    """Funds moved from the parent to a new child (decision 17); `record` restores its record."""

    type: ClassVar[str] = "child_funded"
    at: str
    cycle: int
    operation_id: str
    child_id: str
    amount: Decimal
    record: dict[str, str]


@dataclass(frozen=True)
class ChildRefunded(ActivityEvent):
    """Funds of a child that never started came back to the parent."""

    type: ClassVar[str] = "child_refunded"
    at: str
    cycle: int
    operation_id: str
    child_id: str
    amount: Decimal


@dataclass(frozen=True)
class SanctumInitialized(ActivityEvent):
    """The sanctum was checked at boot: `created`, `finished` (files filled in) or `born`."""

    type: ClassVar[str] = "sanctum_initialized"
    at: str
    outcome: str
    filled: list[str]


@dataclass(frozen=True)
class SanctumWritten(ActivityEvent):
    """A sanctum tool wrote a file (sanctum-relative path, bytes written)."""

    type: ClassVar[str] = "sanctum_written"
    at: str
    cycle: int
    path: str
    bytes: int


@dataclass(frozen=True)
class SanctumMerged(ActivityEvent):
    """Two sanctum files became one: `keep` holds the merged text, `drop` was removed."""

    type: ClassVar[str] = "sanctum_merged"
    at: str
    cycle: int
    keep: str
    drop: str


@dataclass(frozen=True)
class SanctumTended(ActivityEvent):
    """The being stamped a tending pass (`date`); the counts the map showed."""

    type: ClassVar[str] = "sanctum_tended"
    at: str
    cycle: int
    date: str
    counts: dict[str, Any]


@dataclass(frozen=True)
class SessionNoteAuto(ActivityEvent):
    """The runtime wrote a session note for a cycle that ended without one."""

    type: ClassVar[str] = "session_note_auto"
    at: str
    cycle: int
    path: str


@dataclass(frozen=True)
class PulseStarted(ActivityEvent):
    """A pulse (a scheduled quiet cycle) begins; `cycle` is the cycle it will live."""

    type: ClassVar[str] = "pulse_started"
    at: str
    cycle: int
    max_rounds: int
    max_cost: Decimal


@dataclass(frozen=True)
class PulseFinished(ActivityEvent):
    """A pulse ended: its cycle status, or `cost_cap` / `round_cap`, and what it cost."""

    type: ClassVar[str] = "pulse_finished"
    at: str
    cycle: int
    status: str
    cost: Decimal


@dataclass(frozen=True)
class JournalEntryAdded(ActivityEvent):
    """A private journal entry was stored (its text never appears here)."""

    type: ClassVar[str] = "journal_entry_added"
    at: str
    cycle: int
    id: str
    mood: str | None
    redacted: bool


@dataclass(frozen=True)
class JournalRecalled(ActivityEvent):
    """The being recalled journal entries: how many it asked for and which it got."""

    type: ClassVar[str] = "journal_recalled"
    at: str
    cycle: int
    k: int
    ids: list[str]


@dataclass(frozen=True)
class JournalPromoted(ActivityEvent):
    """A summary of a journal entry went public under `ref`."""

    type: ClassVar[str] = "journal_promoted"
    at: str
    cycle: int
    id: str
    target: str
    ref: str


@dataclass(frozen=True)
class JournalPurged(ActivityEvent):
    """Entries older than the retention window were deleted."""

    type: ClassVar[str] = "journal_purged"
    at: str
    cycle: int
    count: int


@dataclass(frozen=True)
class JournalRecovered(ActivityEvent):
    """The journal could not be read as it was: what was set aside, kept and lost (no text).

    `reason` is `key_lost` (a fresh journal starts; the old one is crypto-shredded),
    `foreign` (the database belonged to another journal) or `damaged` (salvaged).
    """

    type: ClassVar[str] = "journal_recovered"
    at: str
    cycle: int
    reason: str
    set_aside: str | None
    kept: int
    lost: int
    unreachable: bool


@dataclass(frozen=True)
class CycleFinished(ActivityEvent):
    """A cycle ended: `completed`, `tool_round_limit`, `budget_exhausted` or `cancelled`."""

    type: ClassVar[str] = "cycle_finished"
    at: str
    cycle: int
    status: str


@dataclass(frozen=True)
class OperatorMessage(ActivityEvent):
    """An operator's message reached the being in this cycle (its text is in the
    conversation; `bytes`, its size)."""

    type: ClassVar[str] = "operator_message"
    at: str
    cycle: int
    request_id: str
    bytes: int


@dataclass(frozen=True)
class OperatorPaused(ActivityEvent):
    """The operator paused the being (`effect`: `paused` or `already paused`)."""

    type: ClassVar[str] = "operator_paused"
    at: str
    cycle: int
    request_id: str
    effect: str


@dataclass(frozen=True)
class OperatorResumed(ActivityEvent):
    """The operator resumed the being (`effect`: `resumed` or `was not paused`)."""

    type: ClassVar[str] = "operator_resumed"
    at: str
    cycle: int
    request_id: str
    effect: str


@dataclass(frozen=True)
class OperatorStopped(ActivityEvent):
    """The operator stopped the being (`effect`: `stopping`, or why it was ignored)."""

    type: ClassVar[str] = "operator_stopped"
    at: str
    cycle: int
    request_id: str
    effect: str


@dataclass(frozen=True)
class OperatorCredited(ActivityEvent):
    """The operator added funds: a trusted ledger entry that is never revenue."""

    type: ClassVar[str] = "operator_credited"
    at: str
    cycle: int
    amount: Decimal
    operation_id: str
    request_id: str
    note: str


@dataclass(frozen=True)
class OperatorSanctumWritten(ActivityEvent):
    """The operator wrote a sanctum file: its path, size and SHA-256 before and after."""

    type: ClassVar[str] = "operator_sanctum_written"
    at: str
    cycle: int
    request_id: str
    path: str
    bytes: int
    sha256_before: str | None
    sha256_after: str


@dataclass(frozen=True)
class OperatorRequestRefused(ActivityEvent):
    """An operator request could not be applied; nothing changed."""

    type: ClassVar[str] = "operator_request_refused"
    at: str
    cycle: int
    request_id: str
    kind: str
    reason: str


@dataclass(frozen=True)
class SelfEditProposed(ActivityEvent):
    """Under review, the being proposed a change to its prompt, rules or learnings."""

    type: ClassVar[str] = "self_edit_proposed"
    at: str
    cycle: int
    proposal_id: str
    tool: str
    text: str


@dataclass(frozen=True)
class SelfEditDecided(ActivityEvent):
    """The operator approved (applied) or refused a proposed self-edit."""

    type: ClassVar[str] = "self_edit_decided"
    at: str
    cycle: int
    request_id: str
    proposal_id: str
    decision: str


RECORDS: dict[str, type[ActivityEvent]] = {
    kind.type: kind
    for kind in (
        Started,
        CycleStarted,
        ModelCompleted,
        CostReserved,
        CostReleased,
        CostDebited,
        ToolFinished,
        OutputBounded,
        RevenueCredited,
        MindImported,
        Warned,
        Stopped,
        ChildFunded,
        ChildRefunded,
        SanctumInitialized,
        SanctumWritten,
        SanctumMerged,
        SanctumTended,
        SessionNoteAuto,
        PulseStarted,
        PulseFinished,
        JournalEntryAdded,
        JournalRecalled,
        JournalPromoted,
        JournalPurged,
        JournalRecovered,
        CycleFinished,
        OperatorMessage,
        OperatorPaused,
        OperatorResumed,
        OperatorStopped,
        OperatorCredited,
        OperatorSanctumWritten,
        OperatorRequestRefused,
        SelfEditProposed,
        SelfEditDecided,
    )
}
"""Each event type's record, by its `type`."""
