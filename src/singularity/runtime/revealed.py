"""The conversation as the model may see it during a cycle: a view, nothing copied.

A private tool's call is saved with its arguments concealed and sent as it was made
until the cycle ends (`LiveBeing.conceal`); the view reads each concealed message as its
real contents, so that a round reads only the messages it measures or sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from singularity.domain.records import ChatMessage


class Revealed(Sequence[ChatMessage]):
    """The conversation with each concealed message read as its real contents."""

    def __init__(self, conversation: list[ChatMessage], overlay: dict[int, ChatMessage]) -> None:
        self._conversation = conversation
        self._overlay = overlay

    def __len__(self) -> int:
        return len(self._conversation)

    @overload
    def __getitem__(self, index: int) -> ChatMessage: ...
    @overload
    def __getitem__(self, index: slice) -> list[ChatMessage]: ...
    def __getitem__(self, index: int | slice) -> ChatMessage | list[ChatMessage]:
        if isinstance(index, slice):
            return [self._real(message) for message in self._conversation[index]]
        return self._real(self._conversation[index])

    def _real(self, message: ChatMessage) -> ChatMessage:
        return self._overlay.get(id(message), message)
