"""Text rules shared by every layer: Unicode trim, control characters, UTF-8 length, and
the one rule for text from outside.

**Text from outside is made safe before it is stored or sent.** Python reads a JSON
escape such as `\\ud800`, a non-UTF-8 file name or environment byte as a lone surrogate,
which no UTF-8 file or request body can hold: kept, one such character would make the
being's state unsavable. Every text that enters from a gateway, a skill, Most, a file
name or another process passes `safe_text` (or `safe_json` for a parsed document), which
replaces each lone surrogate with U+FFFD and changes nothing else.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

# The Unicode White_Space property, which is what "trim" strips (spec §2).
UNICODE_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def trim(text: str) -> str:
    """Strip Unicode whitespace from both ends."""
    return text.strip(UNICODE_WHITESPACE)


def has_control(text: str, allowed: str = "") -> bool:
    """Whether any character is a control character (category Cc) other than `allowed`."""
    return any(unicodedata.category(char) == "Cc" and char not in allowed for char in text)


def utf8_length(text: str) -> int | None:
    """The UTF-8 byte length, or None when the text holds a lone surrogate."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> str:
    """Text from outside, safe to store and send: each lone surrogate becomes U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, text)
    return text


def safe_json(value: Any) -> Any:
    """A parsed JSON value with `safe_text` applied to every string and key in it."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, list):
        return [safe_json(item) for item in value]
    if isinstance(value, dict):
        return {safe_text(key): safe_json(item) for key, item in value.items()}
    return value
