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

import bisect
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
    """Where the `wanted` message objects are in `messages` (by identity), in order.

    The scan runs from the newest message and stops once every one is found: the opening
    is the current cycle's, so only the cycle is scanned unless the window archived it.
    """
    ids = {id(message) for message in wanted}
    found: list[int] = []
    for index in range(len(messages) - 1, -1, -1):
        if len(found) == len(ids):
            break
        if id(messages[index]) in ids:
            found.append(index)
    return found[::-1]


def _last(messages: Sequence[ChatMessage], role: str, since: int = 0) -> int | None:
    """The index of the newest message of `role` at or after `since`."""
    for index in range(len(messages) - 1, since - 1, -1):
        if messages[index]["role"] == role:
            return index
    return None


class _Newest:
    """The token costs of the newest messages, summed from the end as far as is asked."""

    def __init__(self, messages: Sequence[ChatMessage], size_of: Callable[[ChatMessage], int]):
        self._messages = messages
        self._size_of = size_of
        self._totals = [0]
        """`_totals[k]`: the cost of the `k` newest messages (strictly increasing)."""

    def fitting_from(self, limit: int) -> int:
        """The first index from which the messages to the end cost at most `limit`
        (`len(messages) + 1` when not even none fit: a negative limit)."""
        messages, totals = self._messages, self._totals
        while totals[-1] <= limit and len(totals) <= len(messages):
            newest = messages[len(messages) - len(totals)]
            totals.append(totals[-1] + tokens_of_size(self._size_of(newest)))
        return len(messages) - (bisect.bisect_right(totals, limit) - 1)


def select_context(
    messages: Sequence[ChatMessage],
    budget_tokens: int,
    opening: Sequence[ChatMessage] | None = None,
    *,
    size_of: Callable[[ChatMessage], int] = message_size,
) -> list[ChatMessage]:
    """The messages to send after the system message.

    `opening` is the current cycle's opening messages, the very objects appended to the
    conversation (each message is a distinct object); without it the last `user` message
    is taken as the opening. `size_of` gives a message's `message_size` (a caller that
    keeps each message's bytes passes its lookup, so that no message is encoded again).
    Only the messages sent, and the one before them, are measured.
    """
    if opening is None:
        last_user = _last(messages, "user")
        opening = [messages[last_user]] if last_user is not None else []
    head = list(opening)
    newest = _Newest(messages, size_of)
    present = _positions(messages, head)
    rounds_from = 0
    if head and len(present) == len(head):
        # The whole cycle, and as many earlier ones as fit, from a user message at or
        # before the opening.
        for start in range(newest.fitting_from(budget_tokens), present[0] + 1):
            if messages[start]["role"] == "user":
                return list(messages[start:])
    if present:
        rounds_from = present[-1] + 1
    # The opening, then the newest whole rounds of the cycle that fit with it. A round
    # starts at an assistant message; tool results never start what is sent.
    left = budget_tokens - sum(tokens_of_size(size_of(message)) for message in head)
    for start in range(max(rounds_from, newest.fitting_from(left)), len(messages)):
        if messages[start]["role"] == "assistant":
            return head + list(messages[start:])
    # Not even the newest round fits: it is sent whole anyway, since the model needs the
    # results of the calls it just made.
    last_round = _last(messages, "assistant", rounds_from)
    return head + (list(messages[last_round:]) if last_round is not None else [])
