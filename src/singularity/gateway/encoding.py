"""Request parts encoded once: each message's compact UTF-8 JSON, kept while it is in use.

A round's request is a new system message and the newest part of the conversation, most
of which the round before measured or sent too. `WireCache` keeps each message's bytes
from its first encoding, so context selection (the token estimate), the reservation and
the request body read the same bytes, and a message carried from round to round is
never encoded again. The body is assembled from those bytes (`gateway.wire`).

Messages are replaced, never mutated, with one exception: withholding a secret replaces
a message's top-level values in place (`LiveBeing`). An entry therefore remembers the
values it was encoded from and serves only while the message still holds those very
objects; it also holds the message itself, so that its `id` cannot be reused meanwhile.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

from singularity.jsoncodec import compact_utf8, string_utf8
from singularity.tools.base import ToolDefinition

Message = Mapping[str, Any]
SWEEP_SLACK = 64


class EncodedMessages(Sequence[Message]):
    """Messages with their compact UTF-8 JSON, in the same order."""

    __slots__ = ("encoded", "messages")

    def __init__(self, messages: Sequence[Message], encoded: Sequence[bytes]) -> None:
        if len(messages) != len(encoded):
            raise ValueError("every message needs its encoding")
        self.messages = tuple(messages)
        self.encoded = tuple(encoded)

    @classmethod
    def of(cls, messages: Sequence[Message]) -> EncodedMessages:
        """`messages` with their bytes: as they are when already encoded, else encoded now."""
        if isinstance(messages, EncodedMessages):
            return messages
        return cls(messages, [compact_utf8(message) for message in messages])

    def __len__(self) -> int:
        return len(self.messages)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> EncodedMessages: ...
    def __getitem__(self, index: int | slice) -> Message | EncodedMessages:
        if isinstance(index, slice):
            return EncodedMessages(self.messages[index], self.encoded[index])
        return self.messages[index]

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __repr__(self) -> str:
        return f"EncodedMessages({list(self.messages)!r})"


_Entry = tuple[Message, tuple[Any, ...], bytes]
"""A message, the values it was encoded from, and its bytes."""


def _serves(entry: _Entry, message: Message) -> bool:
    held, values, _ = entry
    return (
        held is message
        and len(values) == len(message)
        and all(map(operator.is_, values, message.values()))
    )


def _content_utf8(text: str) -> bytes:
    """The bytes of `text` inside a JSON string, its quotes left out."""
    return string_utf8(text)[1:-1]


class WireCache:
    """Each message's bytes from its first encoding; the tool definitions' array likewise."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._tools: tuple[tuple[ToolDefinition, ...], bytes] = ((), b"[]")
        self._system: Message = {"role": "system", "content": ""}
        self._system_parts: tuple[str, ...] = ("",)
        self._part_bytes: dict[str, bytes] = {}

    def system(self, parts: Sequence[str]) -> Message:
        """The system message of the text `parts` join to: the one of the round before
        while its parts are the same, so that its bytes (the largest part of a request)
        are not encoded again; when they change, only the new parts are encoded (a JSON
        string's escapes go character by character, so its content is its parts')."""
        parts = tuple(parts)
        if parts != self._system_parts:
            self._forget(self._system)  # the largest entry, never sent again
            known = self._part_bytes
            content = [known.get(part) or _content_utf8(part) for part in parts]
            self._part_bytes = dict(zip(parts, content, strict=True))
            system = {"role": "system", "content": "".join(parts)}
            encoded = b"".join([b'{"role":"system","content":"', *content, b'"}'])
            self._entries[id(system)] = (system, tuple(system.values()), encoded)
            self._system, self._system_parts = system, parts
        return self._system

    def _forget(self, message: Message) -> None:
        entry = self._entries.get(id(message))
        if entry is not None and entry[0] is message:
            del self._entries[id(message)]

    def bytes_of(self, message: Message) -> bytes:
        """The message's compact UTF-8 JSON (a lone surrogate written as U+FFFD)."""
        entry = self._entries.get(id(message))
        if entry is not None and _serves(entry, message):
            return entry[2]
        encoded = compact_utf8(message)
        self._entries[id(message)] = (message, tuple(message.values()), encoded)
        return encoded

    def size_of(self, message: Message) -> int:
        """The length of the message's bytes."""
        return len(self.bytes_of(message))

    def encode(self, messages: Sequence[Message]) -> EncodedMessages:
        """`messages` with their bytes, each encoded at most once while it is kept."""
        if isinstance(messages, EncodedMessages):
            return messages
        return EncodedMessages(messages, [self.bytes_of(message) for message in messages])

    def keep_only(self, *groups: Sequence[Message]) -> None:
        """Forget every message but those of `groups` and the newest system message (the
        rest left the conversation, or never were in it).

        The entries are swept only once they outnumber twice the messages kept (and
        `SWEEP_SLACK`), so that a round pays a constant on average, not a walk of the
        whole conversation; until then a forgotten entry only takes memory.
        """
        if len(self._entries) <= 2 * sum(map(len, groups)) + SWEEP_SLACK:
            return
        kept: dict[int, _Entry] = {}
        for message in (*itertools.chain.from_iterable(groups), self._system):
            entry = self._entries.get(id(message))
            if entry is not None and entry[0] is message:
                kept[id(message)] = entry
        self._entries = kept

    def tools(self, definitions: Sequence[ToolDefinition]) -> bytes:
        """The compact UTF-8 JSON of the definitions' `tools` array."""
        cached, encoded = self._tools
        if len(cached) != len(definitions) or any(
            a is not b for a, b in zip(cached, definitions, strict=True)
        ):
            encoded = compact_utf8([definition.wire() for definition in definitions])
            self._tools = (tuple(definitions), encoded)
        return encoded
