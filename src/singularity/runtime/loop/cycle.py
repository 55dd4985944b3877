"""One cycle of a being's life (spec §7.2), read top to bottom.

Solvency gate, framing, then up to `max_tool_rounds` model rounds: reserve the worst
case, call the gateway, debit the actual cost once, run the tool calls in order. A round
is two durable steps (`LiveBeing.save`): the reservation, made durable before the call
together with the outcome of the round before's last tool; the completion, its debit and
the assistant message, before the tools run. Each tool's outcome is durable before the
next call: a step of its own before the round's next tool, otherwise with the next
round's reservation or the step that ends the cycle. A stop requested by a signal is
honoured at the next safe point.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from singularity.domain import events, notices
from singularity.domain.records import ChatMessage, ToolCall
from singularity.errors import RetryClass, SingularityError, UpstreamError
from singularity.gateway.encoding import EncodedMessages, WireCache
from singularity.jsoncodec import compact
from singularity.mind.context import select_context
from singularity.mind.framing import framing_text, stimulus_text
from singularity.mind.prompt import system_message_parts
from singularity.money import render_money
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing
from singularity.runtime.loop.extension import Extension
from singularity.runtime.loop.reservation import PromptMeter, Reservation, plan
from singularity.runtime.loop.tool_call import run_tool_call, skip_tool_call
from singularity.tools.catalogue import PRIVATE_PLACEHOLDER, Catalogue

if TYPE_CHECKING:
    from singularity.gateway.client import BramaClient
    from singularity.gateway.wire import Completion

CycleStatus = Literal["completed", "tool_round_limit", "budget_exhausted", "cancelled"]
ROUND_LIMIT_WARNING = "maximum tool rounds reached"
TRUNCATED_WARNING = "truncated: the answer reached max_tokens ({}); {}"
USAGE_MISSING = "the gateway reported no usage: charged the reserved worst case, {} USD"
EMPTY_ANSWER = "empty answer: the model returned neither text nor a tool call"


@dataclass(frozen=True)
class CycleLimits:
    """The numbers a cycle obeys."""

    max_tool_rounds: int
    max_tokens: int
    http_timeout_secs: float
    context_tokens: int
    stimulus: str | None = None


@dataclass(frozen=True)
class CycleReport:
    """The report of one cycle (spec §7.5)."""

    cycle: int
    status: CycleStatus
    final_content: str | None
    balance_usd: str
    earned_usd: str
    net_profit_usd: str
    total_tokens: int
    actions: list[str]

    def to_json(self) -> dict[str, Any]:
        """The report in its field order."""
        return dict(self.__dict__)


@dataclass
class Life:
    """Everything a cycle needs: the being, its tools, its gateway, prices and limits."""

    being: LiveBeing
    catalogue: Catalogue
    gateway: BramaClient
    prices: ledger.Prices
    limits: CycleLimits
    stop_requested: Callable[[], bool] = lambda: False
    may_spend: Callable[[Decimal], bool] = lambda worst_case: True
    """Whether a model call that costs at most its worst case may be made (a pulse's cap);
    when not, the cycle ends `cancelled` before the call."""
    extensions: Sequence[Extension] = ()
    inbox: Callable[[int], list[ChatMessage]] = lambda cycle: []
    """The operator's messages for a cycle, delivered right after its framing."""
    meter: PromptMeter = field(default_factory=PromptMeter)
    """The newest reported prompt size, shared by every copy of this life (pulses)."""
    wire: WireCache = field(default_factory=WireCache)
    """Each message's request bytes, encoded once (shared like `meter`)."""

    def report(self, status: CycleStatus, actions: list[str], final: str | None) -> CycleReport:
        """A report of the being's current numbers."""
        state = self.being.state
        budget = state.budget
        return CycleReport(
            cycle=state.cycle,
            status=status,
            final_content=final,
            balance_usd=render_money(budget.remaining),
            earned_usd=render_money(budget.earned),
            net_profit_usd=render_money(budget.net_profit),
            total_tokens=budget.total_tokens,
            actions=actions,
        )


def request_messages(life: Life, opening: Sequence[ChatMessage] | None = None) -> EncodedMessages:
    """The system message from the mind, then the conversation that fits the context, each
    with its request bytes.

    `opening` is the current cycle's framing (and stimulus): always sent, even after the
    conversation window archived it.
    """
    being, wire = life.being, life.wire
    sections = "".join(extension.prompt_section() for extension in life.extensions)
    system = wire.system(system_message_parts(being.state.mind, sections))
    visible = being.visible()
    chosen = select_context(visible, life.limits.context_tokens, opening, size_of=wire.size_of)
    wire.keep_only(visible, opening or ())
    return wire.encode([system, *chosen])


def plan_call(life: Life, messages: Sequence[Mapping[str, Any]]) -> Reservation:
    """The reservation of a model call that sends `messages` with the whole catalogue."""
    return plan(
        life.prices,
        life.being.state.budget,
        life.meter,
        life.wire.encode(messages).encoded,
        fixed_bytes=len(life.wire.tools(life.catalogue.definitions)),
        max_tokens=life.limits.max_tokens,
        timeout_secs=life.limits.http_timeout_secs,
    )


def opening_messages(life: Life, cycle: int) -> list[ChatMessage]:
    """The framing message of a cycle, and the stimulus on the being's first cycle."""
    state = life.being.state
    messages: list[ChatMessage] = [{"role": "user", "content": framing_text(state, cycle)}]
    if cycle == 1 and life.limits.stimulus:
        messages.append({"role": "user", "content": stimulus_text(life.limits.stimulus)})
    return messages


def can_afford_cycle(life: Life) -> bool:
    """Whether the being is solvent and can cover the worst case of a new cycle's first call."""
    opening = opening_messages(life, life.being.state.cycle + 1)
    sent = request_messages(life)
    messages = EncodedMessages(
        [*sent.messages, *opening], [*sent.encoded, *map(life.wire.bytes_of, opening)]
    )
    reservation = plan_call(life, messages)
    return reservation.affordable(life.being.state.budget)


def _concealed(life: Life, assistant: ChatMessage) -> ChatMessage:
    """The assistant message to save: private tools' arguments replaced, the real one overlaid."""
    calls = assistant.get("tool_calls", [])
    if not any(life.catalogue.is_private(call["function"]["name"]) for call in calls):
        return assistant
    saved: ChatMessage = {"role": "assistant", "content": assistant.get("content", "")}
    saved["tool_calls"] = [
        {
            "id": call["id"],
            "type": call["type"],
            "function": {
                "name": call["function"]["name"],
                "arguments": compact({"omitted": PRIVATE_PLACEHOLDER}),
            },
        }
        if life.catalogue.is_private(call["function"]["name"])
        else call
        for call in calls
    ]
    life.being.conceal(saved, assistant)
    return saved


def _pay(
    life: Life, operation: str, reservation: Reservation, completion: Completion, elapsed_ns: int
) -> None:
    """Journal the completion and debit its cost once; no reported usage costs the reservation."""
    being, cycle = life.being, life.being.state.cycle
    usage = completion.usage
    if usage is None:
        being.journal(
            events.ModelCompleted(being.now(), cycle, events.Usage(0, 0), completion.model)
        )
        # The tokens are unknown: the worst case is paid, no token count is made up.
        charged = ledger.charge_reservation(being, operation, reservation.charge)
        being.journal(
            events.Warned(being.now(), cycle, USAGE_MISSING.format(render_money(charged.total)))
        )
        return
    life.meter.measured(reservation.texts, usage.prompt_tokens)
    being.journal(
        events.ModelCompleted(
            being.now(),
            cycle,
            usage,
            completion.model,
        )
    )
    charge = ledger.price(life.prices, usage.prompt_tokens, usage.completion_tokens, elapsed_ns)
    ledger.debit(being, operation, charge)


def _truncated(life: Life, calls: Sequence[ToolCall]) -> str:
    kept = "the tool calls run" if calls else "its text is kept"
    return TRUNCATED_WARNING.format(life.limits.max_tokens, kept)


def _tool_call_messages(completion: Any) -> list[ToolCall]:
    return [call.wire() for call in completion.tool_calls]


async def live_cycle(life: Life) -> CycleReport:
    """Live one cycle; a gateway error propagates after its reservation is settled."""
    being, state = life.being, life.being.state
    for extension in life.extensions:
        extension.before_check()  # the check and the first round then share what is built
    if not can_afford_cycle(life):
        state.status = "exhausted"
        return life.report("budget_exhausted", [], None)
    being.overlay.clear()  # what was private in the last cycle is not sent again
    for extension in life.extensions:
        await extension.before_cycle()
    state.cycle += 1
    being.journal(events.CycleStarted(being.now(), state.cycle))
    opening = opening_messages(life, state.cycle) + life.inbox(state.cycle)
    state.conversation.extend(opening)
    # Not saved here: the opening is durable with the first reservation (one step before
    # the first model call), or with the step that ends a cycle which makes none.
    actions: list[str] = []
    tools = life.catalogue.definitions
    for _ in range(life.limits.max_tool_rounds):
        if life.stop_requested():
            return life.report("cancelled", actions, None)
        messages = request_messages(life, opening)
        reservation = plan_call(life, messages)
        if not life.may_spend(reservation.charge.total):
            return life.report("cancelled", actions, None)
        if not reservation.affordable(state.budget):
            state.status = "exhausted"
            being.save()
            return life.report("budget_exhausted", actions, None)
        operation = ledger.new_operation_id()
        ledger.reserve(being, operation, reservation.charge)
        being.save()  # the reservation (and the last tool's outcome) before the call is made
        started = time.monotonic_ns()
        being.announce(
            notices.model_call_started(being.now(), state.cycle, state.mind.current_model)
        )
        try:
            completion = await life.gateway.complete(
                state.mind.current_model, messages, tools, timeout=reservation.deadline_secs
            )
        except UpstreamError as error:
            if error.retry is RetryClass.INDETERMINATE:
                # Decision 30: the gateway may have done the work; the worst case is paid.
                ledger.charge_reservation(being, operation, reservation.charge)
            else:
                ledger.release(being, operation)
            being.save()
            raise
        except SingularityError:
            ledger.release(being, operation)  # an answer outside the contract is not paid
            being.save()
            raise
        elapsed = time.monotonic_ns() - started
        _pay(life, operation, reservation, completion, elapsed)
        calls = _tool_call_messages(completion)
        assistant: ChatMessage = {"role": "assistant", "content": completion.content}
        if calls:
            assistant["tool_calls"] = calls
        state.conversation.append(_concealed(life, assistant))
        being.announce(
            notices.model_answered(being.now(), state.cycle, completion.model, completion.content)
        )
        if completion.truncated:
            being.journal(events.Warned(being.now(), state.cycle, _truncated(life, calls)))
        if not calls and not completion.content.strip():
            # Spec 7.2 ends the cycle as `completed` all the same; the journal says what it was.
            being.journal(events.Warned(being.now(), state.cycle, EMPTY_ANSWER))
        if not calls:  # the answer is durable with the cycle's closing step (`live_one`)
            return life.report("completed", actions, completion.content)
        being.save()  # the completion, its debit and the answer, before any tool runs
        for index, call in enumerate(calls):
            if life.stop_requested():
                for skipped in calls[index:]:
                    skip_tool_call(being, skipped)
                being.save()
                return life.report("cancelled", actions, None)
            await run_tool_call(being, life.catalogue, call)
            actions.append(call["function"]["name"])
            if index + 1 < len(calls):
                being.save()  # this outcome is durable before the round's next tool runs
    being.journal(events.Warned(being.now(), state.cycle, ROUND_LIMIT_WARNING))
    being.save()
    return life.report("tool_round_limit", actions, None)
