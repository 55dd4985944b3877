"""The sanctum's layout and naming rules: identity files, standing subjects and dated events."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Literal, TypeVar

IDENTITY_FILES = ("PERSONA.md", "CREED.md", "BOND.md", "HOW-I-REMEMBER.md", "CAPABILITIES.md")
PULSE_FILE = "PULSE.md"
MEMORY = "memory"
SESSIONS = "sessions"
RAW = "raw"
CAPABILITIES = "capabilities"
PENDING = "pending.md"
TENDED = ".tended"
OPEN_QUESTIONS = "open-questions.md"
FOLDERS = ((MEMORY,), (MEMORY, SESSIONS), (RAW,), (CAPABILITIES,))
SESSIONS_PREFIX = f"{MEMORY}/{SESSIONS}/"

SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
EXTENSION = re.compile(r"[a-z0-9]{1,16}")
DATE_PREFIX = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
SLUG_RULE = "[a-z0-9][a-z0-9-]{0,63}"

# Error codes of the sanctum tools (docs/concepts.md lists them).
BOUNDARY = "sanctum_boundary"
NAME = "sanctum_name"
WRITE_ONCE = "sanctum_write_once"
NOT_FOUND = "sanctum_not_found"
HISTORY = "sanctum_history"
SOURCE = "sanctum_source"
TOO_LARGE = "sanctum_too_large"
IO = "sanctum_io"

T = TypeVar("T")
Kind = Literal["identity", "pulse", "standing", "event", "capability", "handmade"]
"""`handmade`: an existing memory file whose name breaks the rules (made by a person)."""


class SanctumRefusal(Exception):
    """A tool call the sanctum refuses: an error code and a message for the model."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def unless_missing(read: Callable[[], T]) -> T | None:
    """What `read` returns, or None when what it reads does not exist (`NOT_FOUND`); any
    other refusal is raised."""
    try:
        return read()
    except SanctumRefusal as refusal:
        if refusal.code == NOT_FOUND:
            return None
        raise


@dataclass(frozen=True)
class Target:
    """A path the write tool may write, and what kind of file it names."""

    parts: tuple[str, ...]
    kind: Kind

    @property
    def path(self) -> str:
        """The sanctum-relative path."""
        return "/".join(self.parts)


def is_slug(text: str) -> bool:
    """Whether `text` is a slug: lowercase ASCII letters, digits and `-`, at most 64."""
    return SLUG.fullmatch(text) is not None


def real_date(text: str) -> bool:
    """Whether `text` is `YYYY-MM-DD` naming a day that exists."""
    if DATE_PREFIX.fullmatch(text) is None:
        return False
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def name_date(name: str) -> str | None:
    """The `YYYY-MM-DD` a file name starts with (the map's "dated files"), else None."""
    head = name[:10]
    return head if DATE_PREFIX.fullmatch(head) else None


def memory_name_kind(name: str) -> Kind:
    """`standing` for `<slug>.md`, `event` for `YYYY-MM-DD-<slug>.md`; else a refusal."""
    stem = name.removesuffix(".md")
    if stem == name:
        raise SanctumRefusal(NAME, "memory files end in .md")
    if DATE_PREFIX.match(stem):
        day, dash, slug = stem[:10], stem[10:11], stem[11:]
        if dash != "-" or not real_date(day) or not is_slug(slug):
            raise SanctumRefusal(
                NAME, f"a dated file is YYYY-MM-DD-<slug>.md with a real date and slug {SLUG_RULE}"
            )
        return "event"
    if not is_slug(stem):
        raise SanctumRefusal(NAME, f"a standing file is <slug>.md with slug {SLUG_RULE}")
    return "standing"


def write_target(parts: tuple[str, ...]) -> Target:
    """What `singularity_sanctum_write` may write at `parts`; a refusal names the rule broken."""
    if len(parts) == 1:
        if parts[0] in IDENTITY_FILES:
            return Target(parts, "identity")
        if parts[0] == PULSE_FILE:
            return Target(parts, "pulse")
    head = parts[0]
    if head == RAW:
        raise SanctumRefusal(
            WRITE_ONCE, "raw files are written once, with singularity_sanctum_intake"
        )
    if head == CAPABILITIES and len(parts) == 2:
        stem = parts[1].removesuffix(".md")
        if stem != parts[1] and is_slug(stem):
            return Target(parts, "capability")
        raise SanctumRefusal(NAME, f"a capability is capabilities/<slug>.md with slug {SLUG_RULE}")
    if head == MEMORY and len(parts) in (2, 3):
        return Target(parts, _memory_kind(parts))
    raise SanctumRefusal(
        NAME,
        "writable paths are the five identity files, PULSE.md, memory/<kind>/<name>.md, "
        "memory/<name>.md and capabilities/<slug>.md",
    )


def _memory_kind(parts: tuple[str, ...]) -> Kind:
    name = parts[-1]
    if len(parts) == 2 and name == PENDING:
        raise SanctumRefusal(NAME, "memory/pending.md is changed with singularity_sanctum_pending")
    if len(parts) == 2 and name == TENDED:
        raise SanctumRefusal(NAME, "memory/.tended is stamped with singularity_sanctum_tended")
    if len(parts) == 3 and not is_slug(parts[1]):
        raise SanctumRefusal(NAME, f"a memory kind folder is named {SLUG_RULE}")
    kind = memory_name_kind(name)
    if len(parts) == 3 and parts[1] == SESSIONS and kind != "event":
        raise SanctumRefusal(NAME, "a session note is memory/sessions/YYYY-MM-DD-<slug>.md")
    return kind


def standing_target(parts: tuple[str, ...]) -> Target:
    """A standing memory file (the only files that take History lines), else a refusal."""
    try:
        target = write_target(parts)
    except SanctumRefusal as refusal:
        if refusal.code == WRITE_ONCE:
            raise
        raise SanctumRefusal(
            NAME, "History lines go into standing memory files: memory/[<kind>/]<slug>.md"
        ) from None
    if target.kind != "standing":
        raise SanctumRefusal(
            NAME, "History lines go into standing memory files: memory/[<kind>/]<slug>.md"
        )
    return target


def raw_name(day: str, area: str, descriptor: str, extension: str) -> str:
    """`YYYY-MM-DD-<area>-<descriptor>.<ext>`, the name of an intake file."""
    if not is_slug(area) or not is_slug(descriptor):
        raise SanctumRefusal(NAME, f"area and descriptor are slugs: {SLUG_RULE}")
    if EXTENSION.fullmatch(extension) is None:
        raise SanctumRefusal(NAME, "ext is 1-16 lowercase letters or digits")
    return f"{day}-{area}-{descriptor}.{extension}"


def runtime_notes_name(day: str, part: int) -> str:
    """The name of the runtime's file of session notes for a day (`part` from 1)."""
    return f"{day}-runtime.md" if part == 1 else f"{day}-runtime-{part}.md"
