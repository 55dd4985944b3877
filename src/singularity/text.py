"""Text rules shared by every layer: Unicode trim, control characters, UTF-8 length."""

from __future__ import annotations

import unicodedata

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
