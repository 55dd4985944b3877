"""What part of the conversation a model round sends (decision 8): a pure function.

The newest messages that fit the context budget, starting at a `user` message and never
separating an assistant message with tool calls from its tool results. When even the
current cycle does not fit, its opening user message is kept with the newest whole
rounds that do.
"""

from __future__ import annotations

from collections.abc import Sequence

from singularity.domain.records import ChatMessage
from singularity.jsoncodec import compact

BYTES_PER_TOKEN = 4


def estimate_tokens(message: ChatMessage) -> int:
    """A token estimate of one message: 4 bytes a token, rounded up, plus framing overhead."""
    return -(-len(compact(message).encode("utf-8", "surrogatepass")) // BYTES_PER_TOKEN) + 4


def _round_starts(messages: Sequence[ChatMessage]) -> list[int]:
    """Indices where a message may begin what is sent: anything but a tool result."""
    return [index for index, message in enumerate(messages) if message["role"] != "tool"]


def select_context(messages: Sequence[ChatMessage], budget_tokens: int) -> list[ChatMessage]:
    """The messages to send after the system message."""
    if not messages:
        return []
    costs = [estimate_tokens(message) for message in messages]
    suffix = [0] * (len(messages) + 1)
    for index in range(len(messages) - 1, -1, -1):
        suffix[index] = suffix[index + 1] + costs[index]
    user_starts = [i for i, message in enumerate(messages) if message["role"] == "user"]
    for start in user_starts:
        if suffix[start] <= budget_tokens:
            return list(messages[start:])
    if not user_starts:
        return list(messages)
    opening = user_starts[-1]
    head = list(messages[opening : opening + 1])
    remaining = budget_tokens - costs[opening]
    for start in _round_starts(messages):
        if start > opening and suffix[start] <= remaining:
            return head + list(messages[start:])
    return list(messages[opening:]) if opening == len(messages) - 1 else head + list(
        messages[_round_starts(messages)[-1] :]
    )
