"""Executing one tool call the model made, with its records, journal events and save (§7.2)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from singularity.domain import events, notices
from singularity.domain.records import ActionRecord, ChatMessage, ToolCall
from singularity.money import RANGE_TEXT
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing
from singularity.runtime.loop.revenue import find_revenue
from singularity.tools.base import Outcome
from singularity.tools.catalogue import Catalogue, private_message, tool_message

log = logging.getLogger(__name__)
CANCELLED_CONTENT = (
    '{"chat_id":null,"content":{"message":"the runtime stopped before this call ran"},'
    '"error_code":"cancelled","message_id":null,"status":"failed"}'
)
INTERRUPTED_CONTENT = (
    '{"chat_id":null,"content":{"message":"the runtime stopped while this call ran; '
    'its effect is unknown"},"error_code":"interrupted","message_id":null,'
    '"status":"indeterminate"}'
)


@dataclass(frozen=True)
class CallResult:
    """The outcome of one executed call."""

    name: str
    outcome: Outcome


def _remember_resource(ids: list[str], value: str | None) -> None:
    if value is not None and value not in ids:
        ids.append(value)


async def execute_tool_call(being: LiveBeing, catalogue: Catalogue, call: ToolCall) -> CallResult:
    """Run one call, record it, append its tool message, journal it, credit revenue, save."""
    result = await run_tool_call(being, catalogue, call)
    being.save()
    return result


async def run_tool_call(being: LiveBeing, catalogue: Catalogue, call: ToolCall) -> CallResult:
    """Run one call, record it, append its tool message, journal it, credit revenue; the
    outcome is durable at the caller's next `save`."""
    name = call["function"]["name"]
    outcome = await catalogue.dispatch(name, call["function"]["arguments"])
    # Decision 32: a secret of the runtime that a tool's result holds stops here.
    outcome = replace(outcome, content=being.scrubber.withheld(outcome.content))
    state = being.state
    at = being.now()
    state.record_action(
        ActionRecord(cycle=state.cycle, tool=name, status=outcome.status.value, at=at)
    )
    _remember_resource(state.created_resources.chat_ids, outcome.chat_id)
    _remember_resource(state.created_resources.message_ids, outcome.message_id)
    boundary = catalogue.boundary
    message = tool_message(call["id"], name, outcome, boundary)
    if message.rejection is not None:
        log.warning("output of %s rejected by the boundary: %s", name, message.rejection)
    if message.rejection is not None or message.redactions:
        being.journal(
            events.OutputBounded(
                at, state.cycle, name, boundary.mode, message.rejection, dict(message.redactions)
            )
        )
    saved = message.message
    if catalogue.is_private(name):
        saved = private_message(call["id"], name, message)
        being.conceal(saved, message.message)
    state.conversation.append(saved)
    being.journal(events.ToolFinished(at, state.cycle, name, outcome.status.value))
    being.announce(
        notices.tool_answered(at, state.cycle, name, message.seen_status, str(saved["content"]))
    )
    found = find_revenue(name, outcome.content)
    for key in dict.fromkeys(found.out_of_range):
        refusal = f"{name} reported a {key} outside the money range ({RANGE_TEXT}); not credited"
        being.journal(events.Warned(at, state.cycle, refusal))
    if found.amount is not None:
        ledger.credit(being, found.amount, name)
    return CallResult(name, outcome)


def skip_tool_call(being: LiveBeing, call: ToolCall) -> None:
    """Answer a call that will not run because the runtime is stopping (no dangling call)."""
    being.state.conversation.append(_answer(call, CANCELLED_CONTENT))


def _unanswered(conversation: list[ChatMessage], index: int) -> tuple[int, list[ToolCall]]:
    """Where the answers to the assistant message at `index` end, and its calls they miss."""
    end = index + 1
    answered: set[str | None] = set()
    while end < len(conversation) and conversation[end]["role"] == "tool":
        answered.add(conversation[end].get("tool_call_id"))
        end += 1
    calls = conversation[index].get("tool_calls", [])
    return end, [call for call in calls if call["id"] not in answered]


def _answer(call: ToolCall, content: str) -> ChatMessage:
    return {
        "role": "tool",
        "content": content,
        "tool_call_id": call["id"],
        "name": call["function"]["name"],
    }


def answer_open_calls(being: LiveBeing) -> int:
    """Answer every tool call of the conversation that no tool message answers.

    A stop (an immediate exit, or a kill the next boot repairs) can leave the calls of the
    newest model answer open, and a server that holds to OpenAI's rule refuses every
    request after an unanswered call. Calls run one at a time and only a call's own await
    lets anything else happen, so the newest answer's first open call is the one that was
    in flight (its effect is unknown: recorded and journaled `indeterminate`) and the rest
    never ran (`cancelled`). An open call of an older answer (left by an earlier version
    of the runtime) is answered `interrupted` where it stands, before the next message.
    Returns how many calls were answered.
    """
    state = being.state
    conversation = state.conversation
    assistants = [i for i, message in enumerate(conversation) if message["role"] == "assistant"]
    answered = 0
    for index in reversed(assistants):
        end, open_calls = _unanswered(conversation, index)
        if not open_calls:
            continue
        answered += len(open_calls)
        if index != assistants[-1] or end != len(conversation):
            conversation[end:end] = [_answer(call, INTERRUPTED_CONTENT) for call in open_calls]
            continue
        name = open_calls[0]["function"]["name"]
        at = being.now()
        state.record_action(
            ActionRecord(cycle=state.cycle, tool=name, status="indeterminate", at=at)
        )
        being.journal(events.ToolFinished(at, state.cycle, name, "indeterminate"))
        conversation.append(_answer(open_calls[0], INTERRUPTED_CONTENT))
        conversation.extend(_answer(call, CANCELLED_CONTENT) for call in open_calls[1:])
    return answered
