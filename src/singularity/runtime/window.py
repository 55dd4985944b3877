"""The bytes of the conversation window (decision 8), kept as a running sum.

The being appends messages at the end of its conversation and cuts the oldest from the
front. The meter remembers the list and the newest message it measured, so a save adds
only the messages appended since, and a cut subtracts what left: the cost of a save does
not grow with the window. Anything else (the list replaced, a message inserted before
the newest one measured) is noticed, and a message whose values were replaced in place
is told (`forget`); the sum is then taken again, from the sizes already known.
"""

from __future__ import annotations

from collections.abc import Sequence

from singularity.domain.records import ChatMessage
from singularity.jsoncodec import compact


def window_size(message: ChatMessage) -> int:
    """The bytes a message takes in the window: its compact JSON in UTF-8."""
    return len(compact(message).encode("utf-8", "surrogatepass"))


class WindowMeter:
    """Each message's window bytes, and their sum over the conversation."""

    def __init__(self) -> None:
        self._sizes: dict[int, int] = {}
        self._measured: list[ChatMessage] | None = None
        self._count = 0
        """How many of the oldest messages of `_measured` the sum covers."""
        self._newest: ChatMessage | None = None
        self._total = 0

    def size(self, message: ChatMessage) -> int:
        """The message's window bytes, measured once while it is in the window."""
        key = id(message)
        size = self._sizes.get(key)
        if size is None:
            size = window_size(message)
            self._sizes[key] = size
        return size

    def total(self, conversation: list[ChatMessage]) -> int:
        """The window bytes of the whole conversation."""
        start = self._count
        if not (
            conversation is self._measured
            and 0 < start <= len(conversation)
            and conversation[start - 1] is self._newest
        ):
            start, self._total = 0, 0
        for message in conversation[start:]:
            self._total += self.size(message)
        self._measured, self._count = conversation, len(conversation)
        self._newest = conversation[-1] if conversation else None
        return self._total

    def cut(self, leaving: Sequence[ChatMessage]) -> None:
        """The oldest messages of the measured conversation, about to leave it."""
        for message in leaving:
            size = self._sizes.pop(id(message), None)
            if size is None:
                self._measured = None  # not measured: the sum is taken again
            else:
                self._total -= size
        self._count -= len(leaving)

    def forget(self, message: ChatMessage) -> None:
        """The message's values were replaced in place: measure it again."""
        self._sizes.pop(id(message), None)
        self._measured = None

    def reset(self) -> None:
        """Forget every size (the state was replaced)."""
        self._sizes.clear()
        self._measured = None
