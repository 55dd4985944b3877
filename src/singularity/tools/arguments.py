"""The kinds of argument a tool takes: each gives its JSON schema and checks a model's value.

A kind annotates a keyword-only parameter of a typed tool (`singularity.tools.typed`):
`query: Annotated[str, Text(1024)]`. `parse(key, value)` returns the value the tool
receives, or raises `ToolArgumentError` with the message the model sees; the value of a
required argument the model left out is `MISSING`.

"Required text" (`Text`, spec §2, §11): a JSON string, trimmed of Unicode whitespace,
non-empty, within a byte bound in UTF-8, with no control character (general category Cc)
left after trimming. Any breach is `invalid_arguments` with the message `<key> is invalid`.

"Control character" is general category Cc only (U+0000-001F, U+007F-009F). Format
characters (Cf), including the bidi embeddings, overrides and isolates (U+202A-202E,
U+2066-2069), are accepted: memories may be written in any script. A lone surrogate
(such as U+D800, which JSON decoding of its escape can produce) has no UTF-8 form and
makes a value invalid.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Protocol

from singularity.text import UNICODE_WHITESPACE, has_control, trim, utf8_length
from singularity.timestamps import parse_timestamp
from singularity.tools.base import JsonObject, ToolArgumentError

# `UNICODE_WHITESPACE` (the White_Space property), `trim`, `has_control` (category Cc)
# and `utf8_length` (None for a lone surrogate) live in `singularity.text`, shared with
# the other layers, and are re-exported here as part of this module's interface.


class Missing(Enum):
    """The value of a required argument the model left out (no kind accepts it)."""

    MISSING = "MISSING"


MISSING = Missing.MISSING
INVALID = "{key} is invalid"
RANGE = "{key} must be an integer from {low} to {high}"
STRING: JsonObject = {"type": "string"}


class Kind(Protocol):
    """What a tool argument is: its JSON schema, and the check of a model's value."""

    def schema(self) -> JsonObject:
        """The argument's JSON schema (a property of the tool's parameters)."""
        ...

    def parse(self, key: str, value: Any) -> Any:
        """The value the tool receives, or `ToolArgumentError`."""
        ...


def invalid(key: str, message: str = INVALID) -> ToolArgumentError:
    """The argument error `message` (formatted with the key) for `key`."""
    return ToolArgumentError(message.format(key=key))


def check_required_text(value: Any, max_bytes: int) -> str | None:
    """The trimmed text if `value` is valid required text within `max_bytes`, else None."""
    if not isinstance(value, str):
        return None
    text = trim(value)
    if len(text) > max_bytes:  # every character takes at least one byte
        return None
    size = utf8_length(text)
    if not text or size is None or size > max_bytes or has_control(text):
        return None
    return text


def required_text(arguments: JsonObject, key: str, max_bytes: int) -> str:
    """The trimmed value of `key`, or `ToolArgumentError("<key> is invalid")`."""
    return Text(max_bytes).parse(key, arguments.get(key))


@dataclass(frozen=True)
class Text:
    """Required text within `max_bytes` (the rule above)."""

    max_bytes: int

    def schema(self) -> JsonObject:
        return dict(STRING)

    def parse(self, key: str, value: Any) -> str:
        text = check_required_text(value, self.max_bytes)
        if text is None:
            raise invalid(key)
        return text


@dataclass(frozen=True)
class Prose:
    """Text that may span lines: trimmed, non-empty, no control character but tab, line
    feed and carriage return; over `max_bytes` is its own error (`too_long`), whose
    message ends with `hint`."""

    max_bytes: int
    too_long: str = "too_long"
    hint: str = ""

    def schema(self) -> JsonObject:
        return dict(STRING)

    def parse(self, key: str, value: Any) -> str:
        if not isinstance(value, str):
            raise invalid(key)
        text = trim(value)
        size = utf8_length(text)
        if not text or size is None or has_control(text, allowed="\t\n\r"):
            raise invalid(key)
        if size > self.max_bytes:
            message = f"{key} is {size} bytes; at most {self.max_bytes} are allowed{self.hint}"
            raise ToolArgumentError(message, self.too_long)
        return text


@dataclass(frozen=True)
class Pattern:
    """A string that matches `pattern` whole, as given (never trimmed)."""

    pattern: re.Pattern[str]

    def schema(self) -> JsonObject:
        return dict(STRING)

    def parse(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not self.pattern.fullmatch(value):
            raise invalid(key)
        return value


@dataclass(frozen=True)
class Uuid:
    """A string holding a UUID; its schema says `format: uuid`."""

    message: str = INVALID

    def schema(self) -> JsonObject:
        return {**STRING, "format": "uuid"}

    def parse(self, key: str, value: Any) -> str:
        if not isinstance(value, str):
            raise invalid(key, self.message)
        try:
            uuid.UUID(value)
        except ValueError:
            raise invalid(key, self.message) from None
        return value


@dataclass(frozen=True)
class Integer:
    """An integer (never a boolean) from `minimum` to `maximum`; the schema shows the
    bounds, and `limit` is an upper bound checked but not shown."""

    minimum: int
    maximum: int | None = None
    limit: int | None = None
    message: str = INVALID
    """Formatted with `key`, `low` and `high`."""

    def schema(self) -> JsonObject:
        schema: JsonObject = {"type": "integer", "minimum": self.minimum}
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema

    def parse(self, key: str, value: Any) -> int:
        high = self.maximum if self.maximum is not None else self.limit
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < self.minimum
            or (high is not None and value > high)
        ):
            raise ToolArgumentError(self.message.format(key=key, low=self.minimum, high=high))
        return value


@dataclass(frozen=True)
class Fraction:
    """A number from 0 to 1, rounded to two decimals."""

    def schema(self) -> JsonObject:
        return {"type": "number", "minimum": 0, "maximum": 1}

    def parse(self, key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ToolArgumentError(f"{key} must be a number from 0 to 1")
        return round(float(value), 2)


@dataclass(frozen=True)
class Timestamp:
    """An RFC 3339 timestamp; a value that is not a string is taken as absent."""

    def schema(self) -> JsonObject:
        return dict(STRING)

    def parse(self, key: str, value: Any) -> datetime | None:
        if not isinstance(value, str):
            return None
        try:
            return parse_timestamp(value)
        except ValueError:
            raise ToolArgumentError(f"{key} must be an RFC 3339 timestamp") from None


@dataclass(frozen=True)
class Choice:
    """One of a few strings (an `enum`)."""

    options: tuple[str, ...]
    message: str = INVALID

    def schema(self) -> JsonObject:
        return {**STRING, "enum": list(self.options)}

    def parse(self, key: str, value: Any) -> str:
        if value not in self.options:
            raise invalid(key, self.message)
        return str(value)


@dataclass(frozen=True)
class Content:
    """File content as UTF-8 bytes: a string, untrimmed, no NUL, at most `max_bytes`, and
    not blank unless `blank`."""

    max_bytes: int
    blank: bool = True
    message: str = "content is invalid or too large"

    def schema(self) -> JsonObject:
        return dict(STRING)

    def parse(self, key: str, value: Any) -> bytes:
        if not isinstance(value, str) or "\x00" in value or not (self.blank or value.strip()):
            raise ToolArgumentError(self.message)
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolArgumentError(self.message) from None
        if len(data) > self.max_bytes:
            raise ToolArgumentError(self.message)
        return data


@dataclass(frozen=True)
class TextList:
    """A list of `least` to `most` items, each required text within `max_bytes`."""

    max_bytes: int
    least: int
    most: int

    def schema(self) -> JsonObject:
        return {"type": "array", "items": dict(STRING)}

    def parse(self, key: str, value: Any) -> list[str]:
        if not isinstance(value, list) or not self.least <= len(value) <= self.most:
            raise invalid(key)
        item = Text(self.max_bytes)
        return [item.parse(key, each) for each in value]


__all__ = [
    "MISSING",
    "RANGE",
    "UNICODE_WHITESPACE",
    "Choice",
    "Content",
    "Fraction",
    "Integer",
    "Kind",
    "Pattern",
    "Prose",
    "Text",
    "TextList",
    "Timestamp",
    "Uuid",
    "check_required_text",
    "has_control",
    "required_text",
    "trim",
    "utf8_length",
]
