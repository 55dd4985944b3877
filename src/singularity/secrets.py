"""Secret values, the files they come from (spec §3.3), and keeping them out of what the
runtime writes (decision 32)."""

from __future__ import annotations

import base64
import json
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, AnyStr

from singularity.errors import FatalIoError, SecretFileError


@dataclass(frozen=True)
class Secret:
    """A credential whose text never appears in repr, str or logs."""

    value: str = field(repr=False)

    def reveal(self) -> str:
        """The secret text; call only where it is used."""
        return self.value

    def __str__(self) -> str:
        return "<redacted>"

    def __repr__(self) -> str:
        return "Secret('<redacted>')"


def os_error_text(error: OSError) -> str:
    """An OS error as `<description> (os error N)`, without the Python-specific decoration."""
    if error.errno is None:
        return str(error)
    return f"{error.strerror or os.strerror(error.errno)} (os error {error.errno})"


def read_secret_file(path: str) -> Secret:
    """Read a secret file: regular (links followed), owner-only, non-empty after trailing CR/LF."""
    try:
        info = os.stat(path)
    except OSError:
        raise SecretFileError(f"not a regular file: {path}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SecretFileError(f"not a regular file: {path}")
    if info.st_mode & 0o077:
        raise SecretFileError(f"{path} must not be group/world accessible")
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except OSError as error:
        raise FatalIoError(f"cannot read secret file {path}: {os_error_text(error)}") from None
    except UnicodeDecodeError as error:
        raise FatalIoError(f"secret file {path} is not UTF-8: {error}") from None
    value = text.rstrip("\r\n")
    if not value:
        raise SecretFileError(f"{path} is empty")
    return Secret(value)


SECRET_MARKER = "[secret withheld]"
MIN_FORM_CHARS = 4
"""Shorter forms are not replaced: they would turn up in ordinary text."""


def _json_escaped(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)[1:-1]


def _base64_forms(data: bytes) -> set[str]:
    """The secret's base64 text, standalone and at each of the three alignments it can have
    inside a longer base64 text (only the characters its own bytes decide), in both
    alphabets."""
    forms = {base64.b64encode(data).decode("ascii")}
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode("ascii")
        start = 4 if offset else 0  # the first group mixes in the bytes before the secret
        end = (offset + len(data)) // 3 * 4  # a last, partial group mixes in the bytes after
        if end - start >= 8:
            forms.add(encoded[start:end])
    return forms | {form.replace("+", "-").replace("/", "_") for form in forms}


def _least(forms: Iterable[AnyStr]) -> list[AnyStr]:
    """The forms that hold no other form: wherever any form occurs, one of these does.

    (One compiled alternation of all forms would look once, but Python's `re` tries every
    alternative at almost every place of ordinary or base64 text: measured 3 to 7 times
    slower on a 10 KiB body than these separate looks, which skip ahead as they search.)
    """
    kept: list[AnyStr] = []
    for form in sorted(set(forms), key=lambda form: (len(form), form)):
        if not any(shorter in form for shorter in kept):
            kept.append(form)
    return kept


class Scrubber:
    """Replaces the runtime's own secret values wherever it writes text (decision 32).

    Each secret is looked for in its plain form, JSON-escaped as the runtime writes JSON,
    and in base64 (standalone, inside a longer base64 text, standard and URL-safe), and
    replaced by `SECRET_MARKER`. Structured values are scrubbed string by string, so a JSON
    document stays a valid document of the same shape.
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._forms: list[str] = []
        self._least: list[str] = []
        self._least_encoded: list[bytes] = []
        for value in values:
            self.add(value)

    def add(self, value: str) -> None:
        """Withhold one more secret value from now on."""
        forms = {value, _json_escaped(value)} | _base64_forms(value.encode("utf-8", "replace"))
        fresh = {form for form in forms if len(form) >= MIN_FORM_CHARS} - set(self._forms)
        # Longest first, so that a form inside a longer one never splits it; ties by text,
        # so that the result does not depend on the process's string hashing.
        self._forms = sorted({*self._forms, *fresh}, key=lambda form: (-len(form), form))
        self._least = _least(self._forms)
        self._least_encoded = _least(form.encode("utf-8", "replace") for form in self._forms)

    def __bool__(self) -> bool:
        return bool(self._forms)

    def found_in(self, data: str | bytes) -> bool:
        """Whether any form of a secret occurs in the text or bytes: a look for each form
        that holds no other (one of those is in whatever holds any form)."""
        if isinstance(data, bytes):
            return any(form in data for form in self._least_encoded)
        return any(form in data for form in self._least)

    def text(self, text: str) -> str:
        """The text with every form of every secret replaced."""
        if not self.found_in(text):  # the usual case: fewer looks than there are forms
            return text
        for form in self._forms:
            if form in text:
                text = text.replace(form, SECRET_MARKER)
        return text

    def withheld(self, value: Any) -> Any:
        """A JSON value, scrubbed when a secret occurs in it (else the very same value)."""
        if not self._forms:
            return value
        text = json.dumps(value, ensure_ascii=False, default=str)
        return self.json(value) if self.found_in(text) else value

    def json_text(self, text: str) -> str:
        """A JSON text (tool arguments) scrubbed in its decoded strings too, where a secret
        escaped once more than the text around it is found; other text as plain text."""
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return self.text(text)
        scrubbed = self.json(value)
        if scrubbed == value:
            return self.text(text)
        return json.dumps(scrubbed, ensure_ascii=False, separators=(",", ":"))

    def json(self, value: Any) -> Any:
        """A JSON value with every string and key scrubbed."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.json(item) for item in value]
        if isinstance(value, dict):
            return {self.text(key): self.json(item) for key, item in value.items()}
        return value


class ScrubbingFilter(logging.Filter):
    """A log handler filter that withholds the runtime's secrets from every record."""

    def __init__(self, scrubber: Scrubber) -> None:
        super().__init__()
        self.scrubber = scrubber

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.scrubber.found_in(message):
            record.msg, record.args = self.scrubber.text(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text and self.scrubber.found_in(record.exc_text):
            record.exc_text = self.scrubber.text(record.exc_text)
        return True
