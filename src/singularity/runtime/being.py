"""A being opened for life: its state store, its state in memory and the step in progress.

`open_being` applies the boot matrix and the resume gate of spec §4 before touching
anything but the lock, so a refused boot changes nothing on disk. The being lives in
its state directory or, with `--state-url postgresql://…`, in a PostgreSQL state store;
its state directory then still holds its local files (inbox, sanctum, journal, logs),
locked the same way. Events are journaled
into the step in progress; `save` makes the step durable (`StateStore.commit`: the events
and what changed, in one sync). Every save keeps the conversation window bounded
(decision 8): messages leaving it go to the store's archive with the step, so nothing
is lost and the save cost stays flat.
"""

from __future__ import annotations

import logging
import operator
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from singularity.config import Settings
from singularity.domain.events import ActivityEvent, encode
from singularity.domain.identity import identity_from
from singularity.domain.records import ChatMessage
from singularity.domain.state import AgentState
from singularity.errors import FatalIoError, StateError
from singularity.jsoncodec import compact
from singularity.runtime.revealed import Revealed
from singularity.runtime.window import WindowMeter
from singularity.secrets import Scrubber
from singularity.storage import funding
from singularity.storage.activity import Event, read_events
from singularity.storage.statedir import STATE_FILE, StateDir
from singularity.store.base import NoBeing, StateStore
from singularity.store.directory import DirectoryStore, replay
from singularity.store.opening import StorePlace, open_store_at, peek_state_at
from singularity.timestamps import Clock, now_text, system_clock

log = logging.getLogger(__name__)
WINDOW_MESSAGES = 400
WINDOW_BYTES = 1 << 20


@dataclass
class LiveBeing:
    """The runtime's hold on one being; every change is journaled and saved through it."""

    store: StateStore
    state: AgentState
    created: bool
    statedir: StateDir
    """The being's locked state directory: its state too, unless it lives in PostgreSQL."""
    events_at_open: list[Event] = field(default_factory=list)
    """The activity journal as the boot found it (the ledger reconciles with it)."""
    clock: Clock = system_clock
    window_messages: int = WINDOW_MESSAGES
    window_bytes: int = WINDOW_BYTES
    listeners: list[Callable[[Event], None]] = field(default_factory=list)
    """Called with every event after it is journaled (the terminal display, JSON logs)."""
    pending: list[Event] = field(default_factory=list)
    """The events of the step in progress: journaled, durable at the next `save`."""
    _window: WindowMeter = field(default_factory=WindowMeter, repr=False)
    _committed: list[ChatMessage] = field(default_factory=list, repr=False)
    """The conversation's messages as the last step committed them (a copy of the list)."""
    _checked: set[int] = field(default_factory=set, repr=False)
    """Ids of the messages already checked for secrets."""
    overlay: dict[int, ChatMessage] = field(default_factory=dict, repr=False)
    """Real contents of concealed messages, sent to the model during the current cycle only."""
    scrubber: Scrubber = field(default_factory=Scrubber)
    """The runtime's own secrets, withheld from everything written through the being (decision
    32): its journal, its state, its archive and what its listeners show."""
    broken: bool = False
    """A write or fsync failed (decision 12): nothing is written to the state again.

    Kept apart from `status`, which is also `failed` after a permanent gateway error;
    that being's state is saved, and a being read back as `failed` can be saved again.
    """

    def __post_init__(self) -> None:
        self._committed = list(self.state.conversation)

    def now(self) -> str:
        """The current time, rendered."""
        return now_text(self.clock)

    def journal(self, record: ActivityEvent) -> None:
        """Add an event to the step in progress, then tell the listeners.

        The event is durable with the step, at the next `save`.
        """
        if self.broken:
            raise FatalIoError("the being failed earlier; its journal is not written again")
        event = self.scrubber.withheld(encode(record))
        self.pending.append(event)
        self._tell(event)

    def announce(self, notice: Event) -> None:
        """Tell the listeners something that is not journaled (`singularity.domain.notices`)."""
        self._tell(self.scrubber.withheld(notice))

    def _tell(self, event: Event) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except OSError:
                pass  # a terminal that cannot be written (a full disk, a closed pipe) is no fault

    def save(self) -> None:
        """Make the step durable: its events, what left the window, the state stamped
        `updated_at`; a failure is fatal."""
        if self.broken:
            raise FatalIoError("the being failed earlier; its state is not written again")
        try:
            self._withhold_from_new_messages()
            self.state.updated_at = self.now()
            leaving = self._overflow()
            conversation = self.state.conversation
            if not self._were_committed(conversation[:leaving]):
                # The store archives messages it holds: the new ones are committed first.
                self._commit()
            self._archive(leaving)
            self._commit()
        except FatalIoError:
            self.fail()
            raise

    def _commit(self) -> None:
        self.store.commit(self.state, self.pending)
        self.pending.clear()
        self._committed = list(self.state.conversation)

    def _were_committed(self, messages: list[ChatMessage]) -> bool:
        """Whether the last step committed every one of these oldest messages.

        They are usually the committed list's front, in order: that is checked by identity
        without building a set of the whole window (a full one is 400 messages), twice a
        round; only otherwise is each looked for.
        """
        if not messages:
            return True
        committed = self._committed
        first = messages[0]
        start = next((i for i, message in enumerate(committed) if message is first), None)
        if start is None:
            return False
        run = committed[start : start + len(messages)]
        if len(run) == len(messages) and all(map(operator.is_, messages, run)):
            return True
        ids = set(map(id, committed))
        return all(id(message) in ids for message in messages)

    def checkpoint(self) -> None:
        """Save the step in progress, then write the whole state where its readers expect it
        (`state.json` alone is current afterwards); a failure is fatal."""
        self.save()
        try:
            self.store.checkpoint(self.state)
        except FatalIoError:
            self.fail()
            raise

    def withhold_secrets(self, scrubber: Scrubber) -> None:
        """Withhold these secrets from now on, and from the state as it was loaded (decision 32).

        Text enters the state scrubbed (completions, tool results, imports); a state saved
        before a secret was configured, or by hand, is scrubbed here, once, at boot.
        """
        self.scrubber = scrubber
        if scrubber.found_in(self.state.to_json()):
            scrubbed = scrubber.json(self.state.model_dump(mode="json"))
            self.state = AgentState.model_validate(scrubbed)
            self._window.reset()
            if not self.created:
                # Every item is new to the store's image: the state is written whole.
                self.store.checkpoint(self.state)
        self._checked = {id(message) for message in self.state.conversation}
        self._committed = list(self.state.conversation)

    def _withhold_from_new_messages(self) -> None:
        """Defense in depth: each message is checked once, before its first save."""
        if not self.scrubber:
            return
        for message in self.state.conversation:
            key = id(message)
            if key in self._checked:
                continue
            self._checked.add(key)
            if self.scrubber.found_in(compact(message)):
                for name, value in self.scrubber.json(dict(message)).items():
                    message[name] = value  # type: ignore[literal-required]
                self._window.forget(message)

    def conceal(self, saved: ChatMessage, real: ChatMessage) -> None:
        """Keep `saved` (concealed) in the conversation; send `real` until the cycle ends."""
        self.overlay[id(saved)] = real

    def revealed(self, message: ChatMessage) -> ChatMessage:
        """The message as the model may see it in this cycle."""
        return self.overlay.get(id(message), message)

    def visible(self) -> Sequence[ChatMessage]:
        """The conversation as the model may see it in this cycle: a view, so that a round
        reads only the messages it sends."""
        return Revealed(self.state.conversation, self.overlay)

    def fail(self) -> None:
        """Mark the being failed (decision 12): its store refuses every write from now on.

        The failed step is not durable; the being resumes from the step before it.
        """
        self.broken = True
        self.state.status = "failed"

    def close(self) -> None:
        """Release the being (its store, its lock or lease, its state directory)."""
        try:
            self.store.close()
        finally:
            if not isinstance(self.store, DirectoryStore):
                self.statedir.close()

    def _overflow(self) -> int:
        """How many of the oldest messages leave the window."""
        conversation = self.state.conversation
        total = self._window.total(conversation)
        leaving = 0
        while leaving < newest_round(conversation) and (
            len(conversation) - leaving > self.window_messages or total > self.window_bytes
        ):
            total -= self._window.size(conversation[leaving])
            leaving += 1
        return leaving

    def _archive(self, leaving: int) -> None:
        """Cut the `leaving` oldest messages; the store archives them with the step."""
        if not leaving:
            return
        conversation = self.state.conversation
        mind = self.state.mind
        self._window.cut(conversation[:leaving])
        for message in conversation[:leaving]:
            self._checked.discard(id(message))
        del conversation[:leaving]
        mind.conversation_archived += leaving


def place_of(settings: Settings) -> StorePlace:
    """Where the being of these settings lives."""
    return StorePlace.chosen(settings.state_dir, settings.state_url)


def check_boot_matrix(settings: Settings, exists: bool, resume: bool) -> None:
    """Spec §4: a new being needs no state, a resumed one needs it."""
    if resume and not exists:
        raise StateError("resume requested but no state exists")
    if exists and not resume:
        place = place_of(settings)
        where = (
            place.label(settings.agent_id)
            if place.is_postgres
            else os.path.join(settings.state_dir, STATE_FILE)
        )
        raise StateError(f"state already exists at {where}; use --resume or a new directory")


def check_identity(settings: Settings, state: AgentState | None) -> None:
    """The resume gate: every identity field of the saved being equals the configuration's."""
    if state is not None and state.identity != identity_from(settings):
        raise StateError("resume identity does not match configuration")


def check_state(settings: Settings) -> None:
    """The boot matrix and the resume gate, read-only and without the lock (for `doctor`)."""
    state = peek_state_at(place_of(settings), settings.agent_id)
    check_boot_matrix(settings, state is not None, settings.resume)
    check_identity(settings, state)


def newest_round(conversation: list[ChatMessage]) -> int:
    """Where the newest round starts: its assistant message, when only its tool results
    follow it; otherwise the newest message. The window never cuts into it (decision 8)."""
    end = len(conversation) - 1
    start = end
    while start > 0 and conversation[start]["role"] == "tool":
        start -= 1
    if start < end and conversation[start]["role"] != "assistant":
        return end
    return max(start, 0)


def open_being(
    settings: Settings, *, resume: bool | None = None, clock: Clock = system_clock
) -> LiveBeing:
    """Open the being's store and apply the boot matrix; the new being is not yet saved.

    The boot matrix, the resume gate and the journal are checked on what is there before
    recovery (a replay of the redo log, a checkpoint) changes anything.
    """
    resume = settings.resume if resume is None else resume
    place = place_of(settings)
    if place.is_postgres:
        return _open_in_postgres(settings, place, resume, clock)
    if resume and not os.path.lexists(settings.state_dir):
        raise StateError("resume requested but no state exists")
    store = DirectoryStore.open(settings.state_dir)
    statedir = store.statedir
    try:
        exists = statedir.has_state()
        check_boot_matrix(settings, exists, resume)
        check_identity(settings, replay(statedir.fd).state if exists else None)
        read_events(statedir.fd)  # refuses a corrupt journal before anything is changed
        statedir.remove_stale_temps()
        state = store.load()
        being = _being(settings, store, statedir, state, clock)
    except BaseException:
        store.close()
        raise
    return being


def _open_in_postgres(
    settings: Settings, place: StorePlace, resume: bool, clock: Clock
) -> LiveBeing:
    """A being in a PostgreSQL store, its local files in its own locked state directory."""
    statedir = StateDir.open(settings.state_dir)
    try:
        if statedir.has_state():
            raise StateError(
                f"{settings.state_dir} holds a being of its own ({STATE_FILE}); give the being "
                f"in {place.shown()} a state directory of its own"
            )
        # Only a new being is made: a resumed one that is not there leaves no lease row.
        store = open_store_at(place, settings.agent_id, create=not resume)
    except NoBeing:
        statedir.close()
        raise StateError(
            f"resume requested but no state exists at {place.label(settings.agent_id)}"
        ) from None
    except BaseException:
        statedir.close()
        raise
    try:
        statedir.remove_stale_temps()
        state = store.load()  # a read: nothing in the store is repaired at boot
        check_boot_matrix(settings, state is not None, resume)
        check_identity(settings, state)
        _record_place(store, settings.state_dir)
        being = _being(settings, store, statedir, state, clock)
    except BaseException:
        store.close()
        statedir.close()
        raise
    return being


def _record_place(store: StateStore, state_dir: str) -> None:
    """Tell the store where the being's state directory is, so operator requests find it."""
    from singularity.store.postgres.places import record_place
    from singularity.store.postgres.store import PostgresStore

    if isinstance(store, PostgresStore):
        record_place(store, os.path.abspath(state_dir))


def _being(
    settings: Settings,
    store: StateStore,
    statedir: StateDir,
    state: AgentState | None,
    clock: Clock,
) -> LiveBeing:
    """The being opened, a new one made when its store holds none (funded by a parent's
    grant, if one is waiting)."""
    if statedir.removed_temps:
        log.warning("removed leftover temp files: %s", ", ".join(statedir.removed_temps))
    created = state is None
    if state is None:
        grant = funding.claim(statedir.fd)
        starting = grant.amount if grant is not None else settings.starting_balance
        state = AgentState.new(
            identity_from(settings), settings.brama_model, starting, now_text(clock)
        )
    return LiveBeing(
        store,
        state,
        created=created,
        statedir=statedir,
        events_at_open=list(store.events_at_open),
        clock=clock,
    )
