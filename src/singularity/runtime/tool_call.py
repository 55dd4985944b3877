"""Executing one tool call the model made, with its records, journal events and save (§7.2)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from singularity.domain import events
from singularity.domain.records import ActionRecord, ToolCall
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing
from singularity.runtime.revenue import trusted_revenue
from singularity.tools.base import Outcome
from singularity.tools.catalogue import PRIVATE_PLACEHOLDER, Catalogue, tool_message

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
    name = call["function"]["name"]
    outcome = await catalogue.dispatch(name, call["function"]["arguments"])
    state = being.state
    at = being.now()
    state.record_action(
        ActionRecord(cycle=state.cycle, tool=name, status=outcome.status.value, at=at)
    )
    _remember_resource(state.created_resources.chat_ids, outcome.chat_id)
    _remember_resource(state.created_resources.message_ids, outcome.message_id)
    message = tool_message(call["id"], name, outcome)
    if message.rejection is not None:
        log.warning("output of %s rejected by the boundary: %s", name, message.rejection)
    if catalogue.is_private(name):
        saved = tool_message(
            call["id"], name, Outcome(outcome.status, PRIVATE_PLACEHOLDER, outcome.error_code)
        ).message
        being.conceal(saved, message.message)
        state.conversation.append(saved)
    else:
        state.conversation.append(message.message)
    being.journal(events.tool_finished(at, state.cycle, name, outcome.status.value))
    amount = trusted_revenue(name, outcome.content)
    if amount is not None:
        ledger.credit(being, amount, name)
    being.save()
    return CallResult(name, outcome)


def skip_tool_call(being: LiveBeing, call: ToolCall) -> None:
    """Answer a call that will not run because the runtime is stopping (no dangling call)."""
    being.state.conversation.append(
        {
            "role": "tool",
            "content": CANCELLED_CONTENT,
            "tool_call_id": call["id"],
            "name": call["function"]["name"],
        }
    )


def answer_open_calls(being: LiveBeing) -> int:
    """Answer the newest assistant message's unanswered calls before an immediate exit.

    Calls run one at a time and only a call's own await lets anything else happen, so
    the first unanswered call is the one in flight (its effect is unknown: recorded and
    journaled `indeterminate`) and the rest never ran. Returns how many were answered.
    """
    state = being.state
    conversation = state.conversation
    newest = next(
        (i for i in range(len(conversation) - 1, -1, -1) if conversation[i]["role"] == "assistant"),
        None,
    )
    if newest is None:
        return 0
    answered = {m.get("tool_call_id") for m in conversation[newest + 1 :] if m["role"] == "tool"}
    open_calls = [
        call for call in conversation[newest].get("tool_calls", []) if call["id"] not in answered
    ]
    for position, call in enumerate(open_calls):
        name = call["function"]["name"]
        if position == 0:
            at = being.now()
            state.record_action(
                ActionRecord(cycle=state.cycle, tool=name, status="indeterminate", at=at)
            )
            being.journal(events.tool_finished(at, state.cycle, name, "indeterminate"))
        conversation.append(
            {
                "role": "tool",
                "content": INTERRUPTED_CONTENT if position == 0 else CANCELLED_CONTENT,
                "tool_call_id": call["id"],
                "name": name,
            }
        )
    return len(open_calls)
