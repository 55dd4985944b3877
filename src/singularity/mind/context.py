"""What part of the conversation a model round sends (decision 8): a pure function.

The newest messages that fit the context budget, starting at a `user` message and never
separating an assistant message with tool calls from its tool results. The current
cycle's opening messages (its framing, and the stimulus on the being's first cycle) are
always sent: when the whole cycle does not fit, they are kept with the newest whole
rounds that do, and when the conversation window has already archived them (a cycle
with very large tool results), they are put back in front. Tool results whose assistant
message left the window are never sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from singularity.domain.records import ChatMessage
from singularity.jsoncodec import compact_utf8

BYTES_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4


def message_size(message: ChatMessage) -> int:
    """The bytes of the message's compact UTF-8 JSON, as a request carries it."""
    return len(compact_utf8(message))


def tokens_of_size(size: int) -> int:
    """The token estimate of a message of `size` bytes: 4 bytes a token, rounded up, plus
    framing overhead."""
    return -(-size // BYTES_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS


def estimate_tokens(message: ChatMessage) -> int:
    """A token estimate of one message (`tokens_of_size` of its `message_size`)."""
    return tokens_of_size(message_size(message))


def _positions(messages: Sequence[ChatMessage], wanted: Sequence[ChatMessage]) -> list[int]:
    """Where the `wanted` message objects are in `messages` (by identity), in order."""
    ids = {id(message) for message in wanted}
    return [index for index, message in enumerate(messages) if id(message) in ids]


def select_context(
    messages: Sequence[ChatMessage],
    budget_tokens: int,
    opening: Sequence[ChatMessage] | None = None,
    *,
    size_of: Callable[[ChatMessage], int] = message_size,
) -> list[ChatMessage]:
    """The messages to send after the system message.

    `opening` is the current cycle's opening messages, the very objects appended to the
    conversation; without it the last `user` message is taken as the opening. `size_of`
    gives a message's `message_size` (a caller that keeps each message's bytes passes
    its lookup, so that no message is encoded again).
    """
    if opening is None:
        users = [i for i, message in enumerate(messages) if message["role"] == "user"]
        opening = [messages[users[-1]]] if users else []
    head = list(opening)
    costs = [tokens_of_size(size_of(message)) for message in messages]
    suffix = [0] * (len(messages) + 1)
    for index in range(len(messages) - 1, -1, -1):
        suffix[index] = suffix[index + 1] + costs[index]
    present = _positions(messages, head)
    rounds_from = 0
    if head and len(present) == len(head):
        # The whole cycle, and as many earlier ones as fit, from a user message at or
        # before the opening.
        for start in range(present[0] + 1):
            if messages[start]["role"] == "user" and suffix[start] <= budget_tokens:
                return list(messages[start:])
    if present:
        rounds_from = present[-1] + 1
    # The opening, then the newest whole rounds of the cycle that fit with it. A round
    # starts at an assistant message; tool results never start what is sent.
    left = budget_tokens - sum(tokens_of_size(size_of(message)) for message in head)
    starts = [
        index
        for index in range(rounds_from, len(messages))
        if messages[index]["role"] == "assistant"
    ]
    for start in starts:
        if suffix[start] <= left:
            return head + list(messages[start:])
    # Not even the newest round fits: it is sent whole anyway, since the model needs the
    # results of the calls it just made.
    return head + (list(messages[starts[-1] :]) if starts else [])
