"""Request parts encoded once: each message's compact UTF-8 JSON, kept while it is in use.

A round's request is a new system message and the newest part of the conversation, most
of which the round before measured or sent too. `WireCache` keeps each message's bytes
from its first encoding, so context selection (the token estimate), the reservation and
the request body read the same bytes, and a message carried from round to round is
never encoded again. The body is assembled from those bytes (`gateway.wire`). A round's
system message (`SystemMessage`) is made from its text's parts and carries their bytes
unjoined (`Pieces`), its text joined only if read: a full being's ~300 KiB of it are
copied once a round, into the body, not first into a text and bytes of their own.

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


class Pieces:
    """Compact UTF-8 JSON kept as the pieces it is the concatenation of; its length and
    equality are those of the joined bytes, which only `bytes()` makes."""

    __slots__ = ("_size", "pieces")

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self.pieces = tuple(pieces)
        self._size = sum(map(len, self.pieces))

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        return b"".join(self.pieces)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pieces):
            other = bytes(other)
        return isinstance(other, bytes) and len(other) == self._size and bytes(self) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Pieces({bytes(self)!r})"


Encoding = bytes | Pieces
"""A message's compact UTF-8 JSON: bytes, or a system message's `Pieces`."""


def pieces_of(encoding: Encoding) -> tuple[bytes, ...]:
    """The bytes an encoding is the concatenation of, in order."""
    return encoding.pieces if isinstance(encoding, Pieces) else (encoding,)


class SystemMessage(Mapping[str, Any]):
    """`{"role": "system", "content": text}` for a text given as its parts, with its
    encoding (`Pieces` made from the parts' bytes); the text is joined when first read."""

    __slots__ = ("_content", "encoding", "parts")

    def __init__(self, parts: tuple[str, ...], encoding: Pieces) -> None:
        self.parts = parts
        self.encoding = encoding
        self._content: str | None = None

    def __getitem__(self, key: str) -> str:
        if key == "role":
            return "system"
        if key != "content":
            raise KeyError(key)
        if self._content is None:
            self._content = "".join(self.parts)
        return self._content

    def __iter__(self) -> Iterator[str]:
        return iter(("role", "content"))

    def __len__(self) -> int:
        return 2

    def __repr__(self) -> str:
        return f"SystemMessage({dict(self)!r})"


def _encoding(message: Message) -> Encoding:
    """A message's encoding: a system message's own, else encoded now."""
    return message.encoding if isinstance(message, SystemMessage) else compact_utf8(message)


class EncodedMessages(Sequence[Message]):
    """Messages with their compact UTF-8 JSON (`Encoding`), in the same order."""

    __slots__ = ("encoded", "messages")

    def __init__(self, messages: Sequence[Message], encoded: Sequence[Encoding]) -> None:
        if len(messages) != len(encoded):
            raise ValueError("every message needs its encoding")
        self.messages = tuple(messages)
        self.encoded = tuple(encoded)

    @classmethod
    def of(cls, messages: Sequence[Message]) -> EncodedMessages:
        """`messages` with their bytes: as they are when already encoded, else encoded now."""
        if isinstance(messages, EncodedMessages):
            return messages
        return cls(messages, [_encoding(message) for message in messages])

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


_Entry = tuple[Message, tuple[Any, ...], Encoding]
"""A message, the values it was encoded from, and its encoding."""


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
        self._system = SystemMessage(("",), Pieces([b'{"role":"system","content":""}']))
        self._part_bytes: dict[str, bytes] = {}

    def system(self, parts: Sequence[str]) -> SystemMessage:
        """The system message of the text `parts` join to: the one of the round before
        while its parts are the same, so that its bytes (the largest part of a request)
        are not encoded again; when they change, only the new parts are encoded (a JSON
        string's escapes go character by character, so its content is its parts')."""
        parts = tuple(parts)
        if parts != self._system.parts:
            known = self._part_bytes
            content = [known.get(part) or _content_utf8(part) for part in parts]
            self._part_bytes = dict(zip(parts, content, strict=True))
            encoding = Pieces([b'{"role":"system","content":"', *content, b'"}'])
            self._system = SystemMessage(parts, encoding)
        return self._system

    def encoding_of(self, message: Message) -> Encoding:
        """The message's compact UTF-8 JSON (a lone surrogate written as U+FFFD)."""
        entry = self._entries.get(id(message))
        if entry is not None and _serves(entry, message):
            return entry[2]
        if isinstance(message, SystemMessage):  # after the lookup: an ABC's check is slower
            return message.encoding
        encoded = compact_utf8(message)
        self._entries[id(message)] = (message, tuple(message.values()), encoded)
        return encoded

    def bytes_of(self, message: Message) -> bytes:
        """`encoding_of` as bytes (a system message's pieces joined)."""
        encoded = self.encoding_of(message)
        return encoded if isinstance(encoded, bytes) else bytes(encoded)

    def size_of(self, message: Message) -> int:
        """The length of the message's bytes."""
        return len(self.encoding_of(message))

    def encode(self, messages: Sequence[Message]) -> EncodedMessages:
        """`messages` with their encodings, each encoded at most once while it is kept."""
        if isinstance(messages, EncodedMessages):
            return messages
        return EncodedMessages(messages, [self.encoding_of(message) for message in messages])

    def keep_only(self, *groups: Sequence[Message]) -> None:
        """Forget every message but those of `groups` (the rest left the conversation, or
        never were in it).

        The entries are swept only once they outnumber twice the messages kept (and
        `SWEEP_SLACK`), so that a round pays a constant on average, not a walk of the
        whole conversation; until then a forgotten entry only takes memory.
        """
        if len(self._entries) <= 2 * sum(map(len, groups)) + SWEEP_SLACK:
            return
        kept: dict[int, _Entry] = {}
        for message in itertools.chain.from_iterable(groups):
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
