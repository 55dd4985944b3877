"""Validation of the arguments a model passes to built-in tools (spec §2, §11).

"Required text": a JSON string, trimmed of Unicode whitespace, non-empty, within a
byte bound in UTF-8, with no control character (general category Cc) left after
trimming. Any breach is `invalid_arguments` with the message `<key> is invalid`.

"Control character" is general category Cc only (U+0000-001F, U+007F-009F). Format
characters (Cf), including the bidi embeddings, overrides and isolates (U+202A-202E,
U+2066-2069), are accepted: memories may be written in any script. A lone surrogate
(such as U+D800, which JSON decoding of its escape can produce) has no UTF-8 form and
makes a value invalid.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from singularity.tools.base import ToolArgumentError

# The Unicode White_Space property, which is what "trim" strips (spec §2).
UNICODE_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def trim(text: str) -> str:
    """Strip Unicode whitespace from both ends."""
    return text.strip(UNICODE_WHITESPACE)


def has_control(text: str) -> bool:
    """Whether any character is a control character (category Cc)."""
    return any(unicodedata.category(char) == "Cc" for char in text)


def utf8_length(text: str) -> int | None:
    """The UTF-8 byte length, or None when the text holds a lone surrogate."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


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


def required_text(arguments: dict[str, Any], key: str, max_bytes: int) -> str:
    """The trimmed value of `key`, or `ToolArgumentError("<key> is invalid")`."""
    text = check_required_text(arguments.get(key), max_bytes)
    if text is None:
        raise ToolArgumentError(f"{key} is invalid")
    return text


__all__ = [
    "UNICODE_WHITESPACE",
    "check_required_text",
    "has_control",
    "required_text",
    "trim",
    "utf8_length",
]
