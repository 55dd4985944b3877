"""The output boundary (spec §10.4): what a tool result may carry into the conversation.

A result is rejected whole (never truncated or redacted) when it is too large, nested
too deep, has a secret-shaped key, holds a NUL or private-key block, mentions a raw
local path, or holds a string that looks like JSON but is not.

The check runs in two iterative passes, so adversarially deep or wide input is refused
without recursion and without building its serialization:

1. the structure of the content itself: only JSON-shaped values (dict with string keys,
   list or tuple, str, int, finite float, bool, None, and finite `Decimal`, which the
   codec renders as a money string), depth at most `MAX_DEPTH`, and the exact compact
   serialization size, counted as the walk goes and refused as soon as it passes
   `MAX_OUTPUT_BYTES`. Only then is `compact` called, to measure the real bytes.
2. the content rules (keys, strings, embedded JSON), recursing into embedded JSON
   strings. Embedded text is parsed only after a bracket pre-scan has shown it nests no
   deeper than the depth rule allows, so the parser never meets deep input.

Values a UTF-8 JSON serialization cannot carry are rejected: lone surrogates,
NaN/Infinity, integers beyond Python's digit limit for `str(int)`, non-string keys and
any non-JSON Python object (a set, bytes, an arbitrary instance).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any, Final

from singularity.jsoncodec import compact, loads_strict
from singularity.money import render_money
from singularity.tools.arguments import UNICODE_WHITESPACE, trim, utf8_length

MAX_OUTPUT_BYTES: Final = 65536
MAX_DEPTH: Final = 8
SECRET_KEY_WORDS: Final = (
    "secret",
    "password",
    "passwd",
    "token",
    "access_token",
    "refresh_token",
    "api_key",
    "authorization",
    "cookie",
    "private_key",
    "privatekey",
    "credential_path",
    "secret_path",
    "key_path",
)
PRIVATE_KEY_MARKERS: Final = (
    "-----begin private key-----",
    "-----begin openssh private key-----",
)
PATH_TOKEN_STRIP: Final = ",;:()[]'\""
# ASCII upper case to lower case, `-` and space to `_`; every other character unchanged.
_KEY_NORMAL: Final = str.maketrans(
    {**{chr(c): chr(c + 32) for c in range(ord("A"), ord("Z") + 1)}, "-": "_", " ": "_"}
)
_SECRET_WORD_SET: Final = frozenset(SECRET_KEY_WORDS)
_SECRET_SUFFIXES: Final = tuple("_" + word for word in SECRET_KEY_WORDS)

# "Split on whitespace" uses the same Unicode White_Space set as trim (spec §2), not
# Python's str.split(), which also splits on U+001C..U+001F; tokens are found by one
# regular expression rather than split and stripped one by one.
_SPACE: Final = "[" + re.escape(UNICODE_WHITESPACE) + "]"
_NOT_SPACE: Final = "[^" + re.escape(UNICODE_WHITESPACE) + "]"
# A token whose stripped form starts with `/` or `file://`: at the start of the text or
# after whitespace, any of the strip characters, then the prefix, then the rest of the
# token. (Stripping the end cannot remove a `/`, so only the start needs looking at.)
PATH_TOKEN: Final = re.compile(
    f"(?:^|(?<={_SPACE}))[{re.escape(PATH_TOKEN_STRIP)}]*(?:/|file://){_NOT_SPACE}*"
)


class BoundaryRejection(Exception):
    """Why a result was rejected; logged, never shown to the model."""


def is_secret_key(key: str) -> bool:
    """Whether an object key looks like it names a credential (rule 3).

    The key is ASCII-lowercased, `-` and space become `_`, and it must equal a secret
    word or end with `_` + a secret word.
    """
    normalized = key.translate(_KEY_NORMAL)
    return normalized in _SECRET_WORD_SET or normalized.endswith(_SECRET_SUFFIXES)


def has_raw_local_path(text: str) -> bool:
    """Whether a whitespace-separated token starts with `/` or `file://` (rule 5).

    Each token is stripped of `, ; : ( ) [ ] ' "` at both ends first.
    """
    return PATH_TOKEN.search(text) is not None


def _reject_depth() -> BoundaryRejection:
    return BoundaryRejection(f"nesting exceeds depth {MAX_DEPTH}")


def _reject_size() -> BoundaryRejection:
    return BoundaryRejection(f"output exceeds {MAX_OUTPUT_BYTES} bytes")


def _string_size(text: str) -> int:
    """Bytes of `text` as a compact JSON string (quotes and escapes included)."""
    size = utf8_length(encode_basestring(text))
    if size is None:
        raise BoundaryRejection("string holds a lone surrogate")
    return size


def _scalar_size(value: object) -> int:
    """Bytes of a non-container value in compact JSON; rejects what JSON cannot carry."""
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, int):
        try:
            return len(int.__repr__(value))
        except ValueError:  # beyond sys.get_int_max_str_digits()
            raise BoundaryRejection("integer too long to serialize") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BoundaryRejection("number is not finite")
        return len(float.__repr__(value))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise BoundaryRejection("number is not finite")
        exponent = value.as_tuple().exponent
        if not isinstance(exponent, int):  # only non-finite decimals have a letter here
            raise BoundaryRejection("number is not finite")
        if (value != 0 and value.adjusted() >= MAX_OUTPUT_BYTES) or -exponent >= MAX_OUTPUT_BYTES:
            raise _reject_size()  # its plain rendering alone is too long
        return len(render_money(value)) + 2  # serialized as a JSON string of ASCII digits
    raise BoundaryRejection(f"{type(value).__name__} is not a JSON value")


def _walk(pending: list[tuple[Any, int]]) -> Iterator[tuple[Any, int]]:
    """The values queued in `pending` with their depths, last first, until none is left (the
    caller queues a value's members as it goes); a value deeper than `MAX_DEPTH` is refused."""
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise _reject_depth()
        yield value, depth


def check_structure(content: Any) -> None:
    """Pass 1: JSON shape, depth and exact compact size of the content itself."""
    size = 0
    pending: list[tuple[Any, int]] = [(content, 0)]
    for value, depth in _walk(pending):
        if isinstance(value, str):
            size += _string_size(value)
        elif isinstance(value, dict):
            count = len(value)
            size += 2 + 2 * count - (1 if count else 0)  # braces, colons, commas
            if size + len(pending) + 2 * count > MAX_OUTPUT_BYTES:
                raise _reject_size()  # every key and member takes at least one more byte
            for key, member in value.items():
                if not isinstance(key, str):
                    raise BoundaryRejection("object key is not a string")
                size += _string_size(key)
                pending.append((member, depth + 1))
        elif isinstance(value, list | tuple):
            count = len(value)
            size += 2 + count - (1 if count else 0)  # brackets, commas
            if size + len(pending) + count > MAX_OUTPUT_BYTES:
                raise _reject_size()  # every element takes at least one more byte
            pending.extend((element, depth + 1) for element in value)
        else:
            size += _scalar_size(value)
        # Every value still pending serializes to at least one byte.
        if size + len(pending) > MAX_OUTPUT_BYTES:
            raise _reject_size()


def max_bracket_nesting(text: str, limit: int) -> int:
    """How deep `[`/`{` nest in JSON text, ignoring brackets inside strings.

    Stops counting once the nesting passes `limit`.
    """
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif char in "]}":
            depth -= 1
    return deepest


def _check_string(text: str, depth: int, pending: list[tuple[Any, int]]) -> None:
    """Rules 4-6 for one string value at `depth`; queues an embedded JSON value."""
    if utf8_length(text) is None:
        raise BoundaryRejection("string holds a lone surrogate")
    trimmed = trim(text)
    if "\x00" in trimmed:
        raise BoundaryRejection("string contains NUL")
    lowered = trimmed.lower()
    if any(marker in lowered for marker in PRIVATE_KEY_MARKERS):
        raise BoundaryRejection("string contains a private key block")
    if has_raw_local_path(text):
        raise BoundaryRejection("string contains a raw local path")
    if trimmed.startswith(("{", "[")):
        # The embedded value sits at depth + 1, so its innermost bracket at depth + nesting.
        if depth + max_bracket_nesting(trimmed, MAX_DEPTH) > MAX_DEPTH:
            raise _reject_depth()
        try:
            embedded = loads_strict(trimmed)
        except (ValueError, RecursionError):
            raise BoundaryRejection("string looks like JSON but does not parse") from None
        pending.append((embedded, depth + 1))


def _check_content(content: Any) -> None:
    """Pass 2: rules 2-6 over the content and every embedded JSON string."""
    pending: list[tuple[Any, int]] = [(content, 0)]
    for value, depth in _walk(pending):
        if isinstance(value, dict):
            for key, member in value.items():
                if utf8_length(key) is None:
                    raise BoundaryRejection("object key holds a lone surrogate")
                if is_secret_key(key):
                    raise BoundaryRejection(f"secret-shaped key: {key[:64]!r}")
                pending.append((member, depth + 1))
        elif isinstance(value, list | tuple):
            pending.extend((element, depth + 1) for element in value)
        elif isinstance(value, str):
            _check_string(value, depth, pending)
        elif isinstance(value, float) and not math.isfinite(value):
            # Embedded JSON such as `[1e400]` parses to infinity in Python.
            raise BoundaryRejection("number is not finite")


def check_output(content: Any) -> None:
    """Raise `BoundaryRejection` when the content may not cross the boundary."""
    check_structure(content)
    try:
        size = len(compact(content).encode("utf-8"))
    except (TypeError, ValueError, RecursionError):  # unreachable after pass 1; defensive
        raise BoundaryRejection("content cannot be serialized as JSON") from None
    if size > MAX_OUTPUT_BYTES:
        raise _reject_size()
    _check_content(content)


def passes_boundary(content: Any) -> bool:
    """Whether the content may cross the boundary."""
    try:
        check_output(content)
    except BoundaryRejection:
        return False
    return True


__all__ = [
    "MAX_DEPTH",
    "MAX_OUTPUT_BYTES",
    "UNICODE_WHITESPACE",
    "BoundaryRejection",
    "check_output",
    "check_structure",
    "has_raw_local_path",
    "is_secret_key",
    "passes_boundary",
]
