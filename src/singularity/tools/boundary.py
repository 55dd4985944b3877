"""The output boundary (spec §10.4): what a tool result may carry into the conversation.

A result is rejected whole (never truncated or redacted) when it is too large, nested
too deep, has a secret-shaped key, holds a NUL or private-key block, mentions a raw
local path, or holds a string that looks like JSON but is not. The walk is iterative,
so adversarially deep input is refused without recursion.
"""

from __future__ import annotations

from typing import Any

from singularity.jsoncodec import compact, loads_strict
from singularity.tools.arguments import UNICODE_WHITESPACE, trim

MAX_OUTPUT_BYTES = 65536
MAX_DEPTH = 8
SECRET_KEY_WORDS = (
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
PRIVATE_KEY_MARKERS = ("-----begin private key-----", "-----begin openssh private key-----")
PATH_TOKEN_STRIP = ",;:()[]'\""


class BoundaryRejection(Exception):
    """Why a result was rejected; logged, never shown to the model."""


def is_secret_key(key: str) -> bool:
    """Whether an object key looks like it names a credential."""
    normalized = "".join(
        "_" if char in "- " else (char.lower() if char.isascii() else char) for char in key
    )
    return any(
        normalized == word or normalized.endswith("_" + word) for word in SECRET_KEY_WORDS
    )


def has_raw_local_path(text: str) -> bool:
    """Whether a whitespace-separated token starts with `/` or `file://`."""
    for token in text.split():
        token = token.strip(PATH_TOKEN_STRIP)
        if token.startswith("/") or token.startswith("file://"):
            return True
    return False


def _max_bracket_nesting(text: str) -> int:
    """How deep `[`/`{` nest in JSON text, ignoring brackets inside strings."""
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
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _check_string(text: str, depth: int, pending: list[tuple[Any, int]]) -> None:
    trimmed = trim(text)
    if "\x00" in trimmed:
        raise BoundaryRejection("string contains NUL")
    lowered = trimmed.lower()
    if any(marker in lowered for marker in PRIVATE_KEY_MARKERS):
        raise BoundaryRejection("string contains a private key block")
    if has_raw_local_path(text):
        raise BoundaryRejection("string contains a raw local path")
    if trimmed[:1] in ("{", "["):
        if depth + _max_bracket_nesting(trimmed) > MAX_DEPTH:
            raise BoundaryRejection(f"nesting exceeds depth {MAX_DEPTH}")
        try:
            embedded = loads_strict(trimmed)
        except (ValueError, RecursionError):
            raise BoundaryRejection("string looks like JSON but does not parse") from None
        pending.append((embedded, depth + 1))


def check_output(content: Any) -> None:
    """Raise `BoundaryRejection` when the content may not cross the boundary."""
    pending: list[tuple[Any, int]] = [(content, 0)]
    string_bytes = 0
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise BoundaryRejection(f"nesting exceeds depth {MAX_DEPTH}")
        if isinstance(value, dict):
            for key, member in value.items():
                if is_secret_key(str(key)):
                    raise BoundaryRejection(f"secret-shaped key: {key}")
                pending.append((member, depth + 1))
        elif isinstance(value, list):
            pending.extend((element, depth + 1) for element in value)
        elif isinstance(value, str):
            string_bytes += len(value)
            if string_bytes > MAX_OUTPUT_BYTES:
                raise BoundaryRejection(f"output exceeds {MAX_OUTPUT_BYTES} bytes")
            _check_string(value, depth, pending)
    size = len(compact(content).encode("utf-8", "surrogatepass"))
    if size > MAX_OUTPUT_BYTES:
        raise BoundaryRejection(f"output exceeds {MAX_OUTPUT_BYTES} bytes")


def passes_boundary(content: Any) -> bool:
    """Whether the content may cross the boundary."""
    try:
        check_output(content)
    except BoundaryRejection:
        return False
    return True


__all__ = ["UNICODE_WHITESPACE", "BoundaryRejection", "check_output", "passes_boundary"]
