"""The output boundary's `redact` mode (decision 21): redact and explain, reject only on limits.

Where the strict rules of spec §10.4 refuse a whole result, this mode keeps what is
ordinary and replaces only what must not cross, each value counted under its reason:

- a secret-like key (the rule-3 words) keeps its name; its value becomes a marker;
- a private-key block (`-----BEGIN … PRIVATE KEY-----` through its `END` line, or to the
  end of the text) becomes a marker;
- a string holding NUL becomes a marker;
- a raw local path token (rule 5's tokens) inside the workspace is shown relative to it,
  any other becomes a marker; a lone `/` or `//` is not a path;
- a string that starts with `{` or `[` is plain text unless it parses as JSON, and then
  its value is treated by these same rules (re-serialized only when something changed).

The size and depth limits, and values JSON cannot carry, still reject the result; the
caller tells the model which. Every marker passes both modes unchanged.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from singularity.jsoncodec import compact, loads_strict
from singularity.text import trim
from singularity.tools.boundary import (
    MAX_DEPTH,
    PATH_TOKEN,
    PATH_TOKEN_STRIP,
    BoundaryRejection,
    is_secret_key,
)

SECRET_MARKER: Final = "<redacted: secret-like key>"
PRIVATE_KEY_MARKER: Final = "<redacted: private key>"
NUL_MARKER: Final = "<redacted: text with NUL>"
PATH_MARKER: Final = "<redacted: local path>"
MARKERS: Final = (SECRET_MARKER, PRIVATE_KEY_MARKER, NUL_MARKER, PATH_MARKER)

SECRET_REASON: Final = "secret-like key"
PRIVATE_KEY_REASON: Final = "private key block"
NUL_REASON: Final = "text with NUL"
OUTSIDE_REASON: Final = "local path outside the workspace"
RELATIVE_REASON: Final = "workspace path shown relative"

NOT_PATHS: Final = frozenset({"/", "//"})
_PRIVATE_KEY_BLOCK: Final = re.compile(
    r"-----begin (?:[a-z0-9]+ )*private key-----.*?(?:-----end (?:[a-z0-9]+ )*private key-----|\Z)",
    re.IGNORECASE | re.DOTALL,
)


class _NotJson(Exception):
    """Embedded text parsed, but to a value JSON cannot carry (a non-finite number)."""


class Redactor:
    """One pass of redact mode over one content value; counts what it replaced."""

    def __init__(self, workspace_roots: Sequence[str]) -> None:
        self.roots = tuple(dict.fromkeys(_normal(root) for root in workspace_roots))
        self.counts: Counter[str] = Counter()

    def redact(self, content: Any) -> Any:
        """The content with everything that may not cross replaced."""
        try:
            return self.value(content)
        except _NotJson:  # only reachable without the structure pass before it
            raise BoundaryRejection("number is not finite") from None

    def value(self, value: Any, depth: int = 0) -> Any:
        """The value with everything that may not cross replaced (depth as in rule 2)."""
        if depth > MAX_DEPTH:
            raise BoundaryRejection(f"nesting exceeds depth {MAX_DEPTH}")
        if isinstance(value, dict):
            result: dict[str, Any] = {}
            for key, member in value.items():
                if is_secret_key(key):
                    if member != SECRET_MARKER:  # already redacted: nothing is replaced
                        self.counts[SECRET_REASON] += 1
                    result[key] = SECRET_MARKER
                else:
                    result[key] = self.value(member, depth + 1)
            return result
        if isinstance(value, list | tuple):
            return [self.value(element, depth + 1) for element in value]
        if isinstance(value, str):
            return self.text(value, depth)
        if isinstance(value, float) and not math.isfinite(value):
            raise _NotJson()
        return value

    def text(self, text: str, depth: int = 0) -> str:
        """One string value: NUL, embedded JSON, private-key blocks, raw local paths."""
        if "\x00" in text:
            self.counts[NUL_REASON] += 1
            return NUL_MARKER
        trimmed = trim(text)
        if trimmed.startswith(("{", "[")):
            embedded = self._embedded(text, trimmed, depth)
            if embedded is not None:
                return embedded
        text = self._private_keys(text)
        return PATH_TOKEN.sub(self._token, text)

    def _embedded(self, text: str, trimmed: str, depth: int) -> str | None:
        """The text with its embedded JSON value redacted; None when it is not JSON."""
        try:
            parsed = loads_strict(trimmed)  # at most 64 KiB: the structure pass came first
        except RecursionError:
            raise BoundaryRejection(f"nesting exceeds depth {MAX_DEPTH}") from None
        except ValueError:
            return None  # plain text that merely starts with a bracket
        before = self.counts.copy()
        try:
            redacted = self.value(parsed, depth + 1)
        except _NotJson:
            self.counts = before
            return None
        if self.counts == before:
            return text
        if "\n" in trimmed:
            return json.dumps(redacted, indent=2, ensure_ascii=False)
        return compact(redacted)

    def _private_keys(self, text: str) -> str:
        def replace(match: re.Match[str]) -> str:
            self.counts[PRIVATE_KEY_REASON] += 1
            return PRIVATE_KEY_MARKER

        return _PRIVATE_KEY_BLOCK.sub(replace, text)

    def _token(self, match: re.Match[str]) -> str:
        token = match.group(0)
        core = token.strip(PATH_TOKEN_STRIP)
        if not core.startswith(("/", "file://")) or core in NOT_PATHS:
            return token
        start = len(token) - len(token.lstrip(PATH_TOKEN_STRIP))
        return token[:start] + self._path(core) + token[start + len(core) :]

    def _path(self, core: str) -> str:
        path = core
        if core.startswith("file://"):
            rest = core[len("file://") :]
            if rest.startswith("localhost/"):
                rest = rest[len("localhost") :]
            if not rest.startswith("/"):
                self.counts[OUTSIDE_REASON] += 1
                return PATH_MARKER
            path = rest
        normal = _normal(path)
        for root in self.roots:
            relative = _relative(normal, root)
            if relative is not None:
                self.counts[RELATIVE_REASON] += 1
                if path.endswith("/") and relative != ".":
                    relative += "/"
                return relative
        self.counts[OUTSIDE_REASON] += 1
        return PATH_MARKER


def _normal(path: str) -> str:
    """The path with `.`, `..` and repeated slashes folded, lexically (no file system)."""
    return "/" + posixpath.normpath(path).lstrip("/")


def _relative(path: str, root: str) -> str | None:
    if path == root:
        return "."
    prefix = root if root.endswith("/") else root + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


__all__ = [
    "MARKERS",
    "NUL_MARKER",
    "PATH_MARKER",
    "PRIVATE_KEY_MARKER",
    "SECRET_MARKER",
    "Redactor",
]
