"""The operator desk of a living being: the inbox applied at safe points, exactly once.

Requests reach the inbox (`singularity.storage.inbox`) from the local socket, from
`singularity say`, or from the console. Between cycles `settle` applies pauses, resumes,
stops, credits and sanctum writes; at the start of a cycle `opening` delivers messages
and review decisions right after the framing message, so they are saved with that
cycle's opening. Every application is journaled with its request id first; a request is
settled once its event is journaled and, for the kinds delivered in an opening, once the
saved cycle counter has reached that cycle. Settled files are removed from the inbox at
the next safe point, so a crash anywhere applies each request once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from singularity.domain import events
from singularity.domain.operator import (
    MESSAGE_PREFIX,
    OPERATOR_NAME,
    OperatorRequest,
    operator_message,
    sha256_text,
)
from singularity.domain.records import ChatMessage
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing
from singularity.sanctum import seam
from singularity.sanctum.descriptors import MAX_READ_BYTES
from singularity.sanctum.names import SanctumRefusal, write_target
from singularity.sanctum.store import parts_of
from singularity.storage import inbox
from singularity.storage.activity import Event
from singularity.timestamps import parse_timestamp
from singularity.tools.self_tools import apply_self_edit

log = logging.getLogger(__name__)
OPENING_KINDS = ("message", "review")
CONTROL_EVENTS = {
    "pause": events.OperatorPaused,
    "resume": events.OperatorResumed,
    "stop": events.OperatorStopped,
}
Applied = (
    events.OperatorPaused
    | events.OperatorResumed
    | events.OperatorStopped
    | events.OperatorCredited
    | events.OperatorSanctumWritten
    | events.OperatorRequestRefused
)
"""The records of a request applied between cycles (durable with their step)."""
AppliedInCycle = events.OperatorMessage | events.SelfEditDecided
"""The records of a request applied in a cycle (durable once its cycle was saved)."""
EDIT_NAMES = {
    "singularity_self_set_prompt": "prompt replacement",
    "singularity_self_add_rule": "rule",
    "singularity_self_add_learning": "learning",
}


class Sanctum(Protocol):
    """What the desk needs of the being's open sanctum."""

    @property
    def store(self) -> seam.Sanctum | None: ...
    def invalidate(self) -> None: ...


@dataclass(frozen=True)
class Proposal:
    """A self-edit waiting for the operator."""

    id: str
    tool: str
    text: str
    cycle: int
    at: str


@dataclass
class OperatorDesk:
    """Applies one being's inbox; follows its journal for what was applied."""

    being: LiveBeing
    booted_at: str
    sanctum: Callable[[], Sanctum | None] = lambda: None
    request_stop: Callable[[], None] = lambda: None
    paused: bool = False
    proposals: dict[str, Proposal] = field(default_factory=dict)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    _applied: dict[str, int | None] = field(default_factory=dict)

    @classmethod
    def open(
        cls,
        being: LiveBeing,
        past: Sequence[Event],
        *,
        sanctum: Callable[[], Sanctum | None] = lambda: None,
        request_stop: Callable[[], None] = lambda: None,
    ) -> OperatorDesk:
        """The desk of a being just opened, its journal `past` read."""
        desk = cls(being, being.now(), sanctum, request_stop)
        saved_cycle = being.state.cycle
        for event in past:
            record = events.readable(event)
            if isinstance(record, AppliedInCycle) and record.cycle > saved_cycle:
                continue  # journaled, but the opening that held it was never saved
            desk.observe(event)
        being.listeners.append(desk.observe)
        inbox.remove_stale_temps(being.statedir.fd)
        return desk

    def observe(self, event: Event) -> None:
        """Follow one journaled event."""
        record = events.readable(event)
        if isinstance(record, events.SelfEditProposed):
            proposal = Proposal(
                record.proposal_id, record.tool, record.text, record.cycle, record.at
            )
            self.proposals[proposal.id] = proposal
        elif isinstance(record, events.SelfEditDecided):
            self.proposals.pop(record.proposal_id, None)
        elif isinstance(record, events.OperatorPaused):
            self.paused = True
        elif isinstance(record, events.OperatorResumed):
            self.paused = False
        if isinstance(record, AppliedInCycle):
            self._applied[record.request_id] = record.cycle
        elif isinstance(record, Applied):
            self._applied[record.request_id] = None

    def settled(self, request_id: str) -> bool:
        """Whether a request's effect is durable."""
        if request_id not in self._applied:
            return False
        cycle = self._applied[request_id]
        return cycle is None or cycle <= self.being.state.cycle

    # Accepting a request (the local socket).

    def accept(self, request: OperatorRequest) -> str:
        """Queue a request durably and wake the loop; a stop also takes effect at once."""
        name = inbox.post(self.being.statedir.fd, request)
        if request.kind == "stop":
            self.request_stop()
        self.wakeup.set()
        return name

    # Waiting between cycles.

    async def wait(self, stop: asyncio.Event, timeout: float | None) -> bool:
        """Wait for a request or a stop; False when the time ran out."""
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.wakeup.wait())]
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in waiters:
                waiter.cancel()
        self.wakeup.clear()
        return bool(done)

    async def sleep(self, stop: asyncio.Event, seconds: float) -> None:
        """Sleep between cycles, applying requests as they come; a message or a pause ends
        the sleep (the next cycle reads the message at once)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not stop.is_set():
            left = deadline - loop.time()
            if left <= 0 or not await self.wait(stop, left):
                return
            if not self.being.broken:
                self.settle()
            if self.paused or self.has_waiting_messages():
                return

    # Proposals (`--review-self-edits`).

    def propose(self, tool: str, text: str) -> str:
        """Record a self-edit for the operator to decide; its proposal id."""
        being = self.being
        proposal_id = str(uuid.uuid4())
        being.journal(
            events.SelfEditProposed(being.now(), being.state.cycle, proposal_id, tool, text)
        )
        return proposal_id

    # Applying requests.

    def settle(self) -> int:
        """Apply the waiting requests that take effect between cycles; how many were applied."""
        being = self.being
        done: list[str] = []
        applied = 0
        for posted in inbox.pending(being.statedir.fd):
            request = posted.request
            if request is None:
                self._unreadable(posted)
                done.append(posted.name)
                continue
            if self.settled(request.id):
                done.append(posted.name)
                continue
            if request.kind in OPENING_KINDS:
                continue
            self._apply(request)
            applied += 1
            done.append(posted.name)
        if being.pending:
            being.save()  # what was applied is durable before its requests leave the inbox
        inbox.remove(being.statedir.fd, done)
        return applied

    def has_waiting_messages(self) -> bool:
        """Whether a message or decision waits for the next cycle."""
        return any(
            posted.request is not None
            and posted.request.kind in OPENING_KINDS
            and not self.settled(posted.request.id)
            for posted in inbox.pending(self.being.statedir.fd)
        )

    def opening(self, cycle: int) -> list[ChatMessage]:
        """Deliver the waiting messages and decisions into the opening of `cycle`."""
        messages: list[ChatMessage] = []
        for posted in inbox.pending(self.being.statedir.fd):
            request = posted.request
            if request is None or request.kind not in OPENING_KINDS:
                continue
            if self.settled(request.id):
                continue
            if request.kind == "message":
                messages.append(self._deliver(request, cycle))
            else:
                note = self._decide(request, cycle)
                if note is not None:
                    messages.append(note)
        return messages

    def _deliver(self, request: OperatorRequest, cycle: int) -> ChatMessage:
        text = request.text or ""
        being = self.being
        being.journal(
            events.OperatorMessage(being.now(), cycle, request.id, len(text.encode("utf-8")))
        )
        message: ChatMessage = operator_message(text)  # type: ignore[assignment]
        return message

    def _decide(self, request: OperatorRequest, cycle: int) -> ChatMessage | None:
        being = self.being
        proposal = self.proposals.get(request.proposal_id or "")
        if proposal is None:
            self._refuse(request, "no such pending self-edit (decided already, or unknown)")
            return None
        decision = "approved" if request.decision == "approve" else "refused"
        being.journal(events.SelfEditDecided(being.now(), cycle, request.id, proposal.id, decision))
        if decision == "approved":
            apply_self_edit(being.state.mind, proposal.tool, proposal.text)
        what = EDIT_NAMES.get(proposal.tool, proposal.tool)
        outcome = (
            "approved it; it is part of your mind from now on"
            if decision == "approved"
            else "refused it; your mind is unchanged"
        )
        content = (
            f"{MESSAGE_PREFIX}I reviewed your proposed {what} (proposal {proposal.id}) "
            f"from cycle {proposal.cycle} and {outcome}."
        )
        return {"role": "user", "name": OPERATOR_NAME, "content": content}

    def _apply(self, request: OperatorRequest) -> None:
        being = self.being
        cycle = being.state.cycle
        if request.kind in CONTROL_EVENTS:
            effect = self._control(request)
            being.journal(CONTROL_EVENTS[request.kind](being.now(), cycle, request.id, effect))
            if request.kind == "stop" and effect == "stopping":
                self.request_stop()
        elif request.kind == "credit":
            assert request.amount is not None
            ledger.operator_credit(being, request.amount, request.id, request.note or "")
        elif request.kind == "sanctum_write":
            self._write_sanctum(request)

    def _control(self, request: OperatorRequest) -> str:
        if request.kind == "pause":
            was, self.paused = self.paused, True
            return "already paused" if was else "paused"
        if request.kind == "resume":
            was, self.paused = self.paused, False
            return "resumed" if was else "was not paused"
        if parse_timestamp(request.at) < parse_timestamp(self.booted_at):
            return "ignored: asked before this start"
        return "stopping"

    def _write_sanctum(self, request: OperatorRequest) -> None:
        sanctum = self.sanctum()
        store = sanctum.store if sanctum is not None else None
        if sanctum is None or store is None:
            self._refuse(request, "the sanctum is not open")
            return
        path, text = request.path or "", request.text or ""
        try:
            target = write_target(parts_of(path))
            existing = store.read_optional(target.parts, MAX_READ_BYTES)
            before = None if existing is None else sha256_text(existing)
            after = sha256_text(text)
            if before != request.base_sha256 and before != after:
                raise SanctumRefusal("conflict", "the file changed since the edit began")
            if before != after:
                store.replace(target.parts, text.encode("utf-8"))
        except SanctumRefusal as refusal:
            self._refuse(request, f"{path}: {refusal.message}")
            return
        being = self.being
        being.journal(
            events.OperatorSanctumWritten(
                being.now(),
                being.state.cycle,
                request.id,
                target.path,
                len(text.encode("utf-8")),
                before,
                after,
            )
        )
        sanctum.invalidate()

    def _refuse(self, request: OperatorRequest, reason: str) -> None:
        being = self.being
        log.warning("operator request %s refused: %s", request.id, reason)
        being.journal(
            events.OperatorRequestRefused(
                being.now(), being.state.cycle, request.id, request.kind, reason
            )
        )

    def _unreadable(self, posted: inbox.Posted) -> None:
        being = self.being
        reason = f"unreadable inbox file {posted.name}: {posted.error}"
        log.warning("%s", reason)
        being.journal(events.Warned(being.now(), being.state.cycle, reason))
