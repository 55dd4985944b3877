"""The sanctum as a part of a live being: its tools, its prompt section and its hooks.

`SanctumCore` carries the Extension hooks without importing the runtime (the layers
point down); `singularity.runtime.loop.sanctum` binds it to the `Extension` base. At boot it
opens (or births, or finishes) the sanctum and writes the session notes a crash left
missing; after every cycle, and at stop, it writes a session note for each cycle that
ended without one. The `Sanctum:` prompt section is cached and rebuilt whenever the
sanctum changes: after a sanctum tool changed a file, at every cycle boundary (before the
solvency check, which builds the cycle's first request), and when an identity file,
PULSE.md, pending.md or the tending stamp changed on disk. It is fitted to the room the
mind leaves it, so a room that changes composes it again, unless the room cut nothing in it
and it still fits (a growing mind's rounds): then the fit would give the same text.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol

from singularity.config import Settings
from singularity.domain import events
from singularity.domain.state import AgentState
from singularity.errors import SingularityError
from singularity.mind.context import BYTES_PER_TOKEN
from singularity.mind.prompt import system_message_parts
from singularity.money import render_money
from singularity.sanctum import tools
from singularity.sanctum.definitions import SANCTUM_TOOLS
from singularity.sanctum.fitting import fit, fits_whole, json_size
from singularity.sanctum.layout import Seed, initialize
from singularity.sanctum.names import (
    IDENTITY_FILES,
    MEMORY,
    PENDING,
    PULSE_FILE,
    SESSIONS,
    TENDED,
    SanctumRefusal,
    runtime_notes_name,
)
from singularity.sanctum.notes import CycleDigest, NoteKeeper, torn_at, with_note
from singularity.sanctum.pulse import QuietHours, Schedule, configured_schedule, schedule_from
from singularity.sanctum.scan import MapCache
from singularity.sanctum.seam import Sanctum
from singularity.sanctum.store import SanctumStore, ensure_root
from singularity.sanctum.wake import SECTION_CAP, Wake, wake
from singularity.timestamps import Clock, parse_timestamp, render_timestamp
from singularity.tools.base import FunctionTool, FunctionToolset, JsonObject, Outcome, Toolset
from singularity.tools.model_menu import MENU_BYTES

log = logging.getLogger(__name__)
Event = dict[str, Any]
MODEL_LABEL = "(the root of every singularity_sanctum_* path)"
SECTION_HEADER = "\n\nSanctum:\n"
UNAVAILABLE = "sanctum_unavailable"
NOTES_FILE_CAP = 64 * 1024
SYSTEM_SHARE = 50
"""Percent of the context budget the whole system message may take."""
MIN_ROOM = 2048
"""The sanctum's floor: its minimal form, whatever the mind takes."""
OTHER_SECTIONS = 256 + MENU_BYTES
"""Room kept for the other parts' sections (the journal's mood line, the `Models:` menu)."""
PREAMBLE = (
    "Your sanctum: your long-form memory as small Markdown files (singularity_sanctum_* "
    "tools). It is not the workspace, whose files singularity_file_read and "
    "singularity_file_write reach; a single fact to keep or look up goes to "
    "singularity_memory_remember and singularity_memory_recall. Below: your identity files "
    "and a map of your memory, without the bodies. A cycle that ends without a session note "
    "in memory/sessions/ gets one from the runtime."
)
FIRST_BREATH = (
    "First Breath is not finished: replace the {{…}} placeholders in {files} with what "
    "you decide; put open questions in memory/open-questions.md and pending.md."
)
TEND = (
    "Tend first: there are session notes since the last tending (see HOW-I-REMEMBER.md), "
    "then call singularity_sanctum_tended."
)
PULSE = (
    "This is a pulse: a scheduled quiet cycle. Tend first, then do the tasks in PULSE.md, "
    "update its State section and end with a plain answer; at most {rounds} model rounds "
    "and {cost} USD."
)
WATCHED = (
    *((name,) for name in IDENTITY_FILES),
    (PULSE_FILE,),
    (MEMORY, PENDING),
    (MEMORY, TENDED),
)


class Host(Protocol):
    """What the sanctum needs of a live being."""

    @property
    def state(self) -> AgentState: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def listeners(self) -> list[Callable[[Event], None]]: ...
    def journal(self, record: events.ActivityEvent) -> None: ...
    def now(self) -> str: ...


class CycleInfo(Protocol):
    """What the sanctum reads of a cycle report."""

    @property
    def cycle(self) -> int: ...
    @property
    def status(self) -> str: ...


@dataclass(frozen=True)
class Composed:
    """The section as composed, and the rooms it stands for (under the same signature)."""

    signature: object
    room: int
    text: str
    whole_from: int | None
    """The section's size when nothing in it was cut to the room: the text is the same in
    every room at least this large (`fits_whole`); None when it was cut: in `room` only."""

    def serves(self, signature: object, room: int) -> bool:
        """Whether composing for `signature` in `room` would give this very text."""
        if signature != self.signature:
            return False
        return room == self.room or (self.whole_from is not None and room >= self.whole_from)


@dataclass(frozen=True)
class PulseLimits:
    """The caps of one pulse."""

    max_rounds: int
    max_cost: Decimal


@dataclass(frozen=True)
class SanctumConfig:
    """Where the sanctum lives and how Pulse is set up."""

    root: str
    pulse: bool = False
    frequency: str = "6h"
    quiet_hours: str = ""
    limits: PulseLimits = PulseLimits(8, Decimal("0.1"))
    default_frequency: timedelta = timedelta(hours=6)
    quiet: tuple[QuietHours, ...] = ()
    context_tokens: int = 8192
    """The model's context budget; the whole system message must fit in it."""

    @classmethod
    def from_settings(cls, settings: Settings, *, pulse: bool | None = None) -> SanctumConfig:
        """The sanctum of a configuration (`<state-dir>/sanctum` unless overridden)."""
        root = settings.sanctum_dir or os.path.join(settings.state_dir, "sanctum")
        frequency, quiet = configured_schedule(settings.pulse_frequency, settings.pulse_quiet_hours)
        rounds = max(1, min(settings.pulse_max_rounds, settings.max_tool_rounds))
        return cls(
            root=os.path.abspath(root),
            pulse=settings.pulse if pulse is None else pulse,
            frequency=settings.pulse_frequency,
            quiet_hours=settings.pulse_quiet_hours,
            limits=PulseLimits(rounds, settings.pulse_max_cost),
            default_frequency=frequency,
            quiet=quiet,
            context_tokens=settings.context_tokens,
        )


def open_folder(root: str) -> SanctumStore:
    """The sanctum folder at `root`, made 0700 if missing (see `ensure_root`)."""
    ensure_root(root)
    return SanctumStore(root)


def today(clock: Clock) -> str:
    """The clock's UTC date, `YYYY-MM-DD`."""
    return render_timestamp(clock())[:10]


class SanctumCore:
    """The sanctum of one live being (see the module docstring)."""

    def __init__(
        self,
        host: Host,
        config: SanctumConfig,
        past: Sequence[Event] = (),
        opener: Callable[[], Sanctum] | None = None,
    ) -> None:
        """Follow the journal from `past` on; nothing is opened until `at_boot`, then the
        sanctum `opener` gives (by default the folder `config.root`)."""
        self.host = host
        self.config = config
        self.opener = opener or (lambda: open_folder(config.root))
        self.store: Sanctum | None = None
        self.failure: str | None = None
        self.notes = NoteKeeper()
        self.last_pulse: datetime | None = None
        self.pulse: PulseLimits | None = None
        """Set while a pulse cycle runs."""
        self._generation = 0
        self._map = MapCache()
        self._notes_part: dict[str, int] = {}
        """The part of each day's runtime notes being filled."""
        self._cached: Composed | None = None
        self._mind_sizes: dict[str, int] = {}
        """The JSON size of each part of the mind's sections, as `room` last measured them."""
        for event in past:
            self._observe(event)
        host.listeners.append(self._observe)
        self._toolset = FunctionToolset(
            [FunctionTool(each.definition, self._handler(each)) for each in SANCTUM_TOOLS]
        )

    def _observe(self, event: Event) -> None:
        self.notes.observe(event)
        record = events.readable(event)
        if isinstance(record, events.PulseFinished):
            try:
                self.last_pulse = parse_timestamp(record.at)
            except ValueError:
                pass

    # The Extension hooks.

    def toolsets(self) -> Sequence[Toolset]:
        """The eleven sanctum tools."""
        return [self._toolset]

    def prompt_section(self) -> str:
        """The `Sanctum:` section: a short preamble, directives, then the wake text, within
        the room the mind's sections leave in the context budget."""
        room, signature = self.room(), self._signature()
        if self._cached is None or not self._cached.serves(signature, room):
            text, whole = self._compose(room)
            section = SECTION_HEADER + text
            size = json_size(section) if whole else None
            self._cached = Composed(signature, room, section, size)
        return self._cached.text

    def room(self) -> int:
        """The JSON bytes the section may take: the system message may take half of the
        context (the conversation gets the rest), and the mind's sections come first."""
        share = self.config.context_tokens * BYTES_PER_TOKEN * SYSTEM_SHARE // 100
        # A JSON string's escapes go character by character: the text's size is its parts'.
        parts = system_message_parts(self.host.state.mind)
        known = self._mind_sizes
        sizes = [known[part] if part in known else json_size(part) for part in parts]
        self._mind_sizes = dict(zip(parts, sizes, strict=True))
        mind = sum(sizes)
        return min(SECTION_CAP, max(MIN_ROOM, share - mind - OTHER_SECTIONS))

    async def at_boot(self) -> None:
        """Open the sanctum (birthing or finishing it), then note cycles a crash left bare."""
        self.open()
        self.settle(self.host.state.cycle, "interrupted (the process ended)")

    def before_check(self) -> None:
        """See the sanctum as it is now: the solvency check builds the section that the
        cycle's first request then reuses unless the sanctum changed in between."""
        self.invalidate()

    async def before_cycle(self) -> None:
        """Note a cycle that an error ended (the section is rebuilt if a note is written)."""
        self.settle(self.host.state.cycle, "ended by an error")

    async def after_cycle(self, report: CycleInfo) -> None:
        """Write the runtime's session note if the cycle left none."""
        self.settle(report.cycle, report.status)

    async def at_stop(self) -> None:
        """Note the cycle a stop cut short, then close the sanctum."""
        self.settle(self.host.state.cycle, "stopped")
        self.close()

    # The sanctum itself.

    def open(self) -> None:
        """Open or create the sanctum and seed what is missing; a failure is a warning."""
        if self.store is not None:
            return
        try:
            store = self.opener()
        except SingularityError as error:
            self._unavailable(str(error))
            return
        try:
            store.remove_stale_temps()
            state = self.host.state
            pulse = (self.config.frequency, self.config.quiet_hours) if self.config.pulse else None
            birth = initialize(store, Seed(state.identity, state.started_at[:10], pulse))
        except (SanctumRefusal, OSError) as error:
            store.close()
            self._unavailable(f"cannot initialise the sanctum: {error}")
            return
        self.store = store
        self.failure = None
        self.host.journal(events.SanctumInitialized(self.host.now(), birth.outcome, birth.filled))
        self.invalidate()

    def _unavailable(self, reason: str) -> None:
        self.failure = reason
        log.warning("sanctum unavailable: %s", reason)
        self.host.journal(events.Warned(self.host.now(), self.host.state.cycle, reason))

    def close(self) -> None:
        """Close the sanctum's root descriptor."""
        if self.store is not None:
            self.store.close()
            self.store = None

    def invalidate(self) -> None:
        """Rebuild the prompt section before the next model request."""
        self._generation += 1

    def settle(self, through: int, ended: str) -> None:
        """Write the runtime's note for every cycle up to `through` that has none."""
        store = self.store
        if store is None:
            return
        for digest in self.notes.due(through):
            try:
                name = self._add_note(store, digest, ended)
            except SanctumRefusal as refusal:
                log.warning("cannot write the session note of cycle %d: %s", digest.cycle, refusal)
                continue
            path = f"{MEMORY}/{SESSIONS}/{name}"
            self.host.journal(events.SessionNoteAuto(self.host.now(), digest.cycle, path))
            self.notes.settled(digest.cycle)
            self.invalidate()

    def _add_note(self, store: Sanctum, digest: CycleDigest, ended: str) -> str:
        """Add the cycle's section to the day's file of runtime notes; the file's name.

        Each section is appended (a day's first one makes the file, its header first),
        riding in the being's next durable step: the cheap end of a cycle. A section an
        append left unfinished is cut off first, whole-file.
        """
        part = self._notes_part.get(digest.day, 1)
        while True:
            name = runtime_notes_name(digest.day, part)
            parts = (MEMORY, SESSIONS, name)
            existing = store.read_optional(parts, NOTES_FILE_CAP * 2)
            torn = None if existing is None else torn_at(existing)
            if existing is not None and torn is not None:
                existing = existing[:torn]
                store.replace(parts, existing.encode("utf-8"))
            text = with_note(existing, digest, ended)
            if text is None:
                return name  # written before a crash could journal it
            if existing is not None and len(text.encode("utf-8")) > NOTES_FILE_CAP:
                part += 1
                continue
            added = text[len(existing or "") :].encode("utf-8")
            store.append(parts, added, create=existing is None)
            self._notes_part[digest.day] = part
            return name

    def wake(self, *, pulse: bool = False, bodies: bool = True) -> Wake:
        """The wake text as the being sees it."""
        return wake(self.store, MODEL_LABEL, pulse=pulse, bodies=bodies, cache=self._map)

    def schedule(self) -> Schedule:
        """The pulse schedule: PULSE.md over the configured frequency and quiet hours."""
        text = None
        if self.store is not None:
            try:
                text = self.store.read_optional((PULSE_FILE,))
            except SanctumRefusal:
                text = None
        return schedule_from(text, self.config.default_frequency, self.config.quiet)

    def _signature(self) -> object:
        stamps: list[object] = [self._generation, self.pulse]
        if self.store is not None:
            for parts in WATCHED:
                try:
                    stamps.append(self.store.stamp(parts))
                except SanctumRefusal:
                    stamps.append(None)
        return tuple(stamps)

    def _compose(self, room: int) -> tuple[str, bool]:
        """The section's text after its header, and whether the room cut nothing in it."""
        if self.store is None:
            return f"(unavailable: {self.failure or 'not opened yet'})", True
        try:
            woken = self.wake(pulse=self.pulse is not None)
        except SanctumRefusal as refusal:
            # A request must never fail for the sanctum; the being hears why it is missing.
            return f"(unavailable: {refusal.message})", True
        lines = [PREAMBLE]
        if woken.unfinished:
            lines.append(FIRST_BREATH.format(files=", ".join(name for name, _ in woken.unfinished)))
        if woken.memory is not None and woken.memory.tending_due:
            lines.append(TEND)
        if self.pulse is not None:
            cost = render_money(self.pulse.max_cost)
            lines.append(PULSE.format(rounds=self.pulse.max_rounds, cost=cost))
        preamble = "\n".join(lines) + "\n\n"
        left = room - json_size(SECTION_HEADER + preamble)
        return preamble + fit(woken, left), fits_whole(woken, left)

    def _handler(self, run: tools.SanctumTool) -> Callable[[JsonObject], Any]:
        async def handle(arguments: JsonObject) -> Outcome:
            store = self.store
            if store is None:
                return Outcome.failed(UNAVAILABLE, self.failure or "the sanctum is not open")
            context = tools.Context(
                store,
                lambda: today(self.host.clock),
                lambda bodies: self.wake(pulse=self.pulse is not None, bodies=bodies),
            )
            done = await asyncio.to_thread(run, context, arguments)
            self._record(done)
            return done.outcome

        return handle

    def _record(self, done: tools.Done) -> None:
        host = self.host
        cycle = host.state.cycle
        for path, size in done.written:
            host.journal(events.SanctumWritten(host.now(), cycle, path, size))
        if done.merged is not None:
            host.journal(events.SanctumMerged(host.now(), cycle, *done.merged))
        if done.tended is not None:
            host.journal(events.SanctumTended(host.now(), cycle, *done.tended))
        if done.written or done.merged or done.tended:
            self.invalidate()

    def with_pulse(self, limits: PulseLimits | None) -> None:
        """Mark the cycles that follow as a pulse (or not); the prompt says so."""
        self.pulse = limits
        self.invalidate()
