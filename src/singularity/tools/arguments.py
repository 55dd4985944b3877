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

from typing import Any

from singularity.text import UNICODE_WHITESPACE, has_control, trim, utf8_length
from singularity.tools.base import ToolArgumentError

# `UNICODE_WHITESPACE` (the White_Space property), `trim`, `has_control` (category Cc)
# and `utf8_length` (None for a lone surrogate) live in `singularity.text`, shared with
# the other layers, and are re-exported here as part of this module's interface.


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
