"""The sanctum tools that look: wake, list, grep, read; and what every sanctum tool shares.

Arguments follow the rules of the other built-ins (required text is trimmed, non-empty,
bounded and free of control characters, else `invalid_arguments` with `<key> is
invalid`); paths then pass the workspace grammar and resolve beneath the sanctum root
(`sanctum_boundary` otherwise). Tools run synchronously in a worker thread and return
a `Done`: the outcome for the model and the changes for the journal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from singularity.jsoncodec import compact
from singularity.sanctum import search
from singularity.sanctum.names import (
    MEMORY,
    TENDED,
    SanctumRefusal,
    name_date,
)
from singularity.sanctum.search import Found
from singularity.sanctum.store import MAX_READ_BYTES, SanctumStore, parts_of
from singularity.sanctum.wake import Wake
from singularity.tools.arguments import required_text
from singularity.tools.base import JsonObject, Outcome, ToolArgumentError
from singularity.tools.boundary import MAX_OUTPUT_BYTES

MAX_PATH_BYTES = 4096
MAX_QUERY_BYTES = 1024
MAX_HITS = 50
MAX_HIT_CHARS = 300
MAX_ENTRIES = 200
READ_WINDOW = 24 * 1024
MAX_CONTENT_BYTES = 64 * 1024
CONTENT_MESSAGE = "content is invalid or too large"


@dataclass
class Done:
    """A tool's outcome, and what it changed (for the journal)."""

    outcome: Outcome
    written: list[tuple[str, int]] = field(default_factory=list)
    merged: tuple[str, str] | None = None
    tended: tuple[str, dict[str, Any]] | None = None


@dataclass(frozen=True)
class Context:
    """What the tools need: the open store, today's date, and the current wake."""

    store: SanctumStore
    today: Callable[[], str]
    wake: Callable[[bool], Wake]
    """The wake text; the argument asks for the identity bodies."""


def failed(refusal: SanctumRefusal | ToolArgumentError) -> Done:
    """A refusal as a failed outcome; nothing was changed."""
    if isinstance(refusal, SanctumRefusal):
        return Done(Outcome.failed(refusal.code, refusal.message))
    return Done(Outcome.failed(refusal.error_code, refusal.message))


def path_argument(arguments: JsonObject, key: str = "path") -> tuple[str, tuple[str, ...]]:
    """The trimmed path text and its components."""
    text = required_text(arguments, key, MAX_PATH_BYTES)
    return text, parts_of(text)


def optional_text(arguments: JsonObject, key: str, max_bytes: int) -> str | None:
    """An optional text argument: absent (or null) is None, else the rules of required text."""
    if arguments.get(key) is None:
        return None
    return required_text(arguments, key, max_bytes)


def content_bytes(arguments: JsonObject, key: str = "content") -> bytes:
    """The content argument as UTF-8: a string, not blank, no NUL, at most 64 KiB."""
    value = arguments.get(key)
    if not isinstance(value, str) or "\x00" in value or not value.strip():
        raise ToolArgumentError(CONTENT_MESSAGE)
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolArgumentError(CONTENT_MESSAGE) from None
    if len(data) > MAX_CONTENT_BYTES:
        raise ToolArgumentError(CONTENT_MESSAGE)
    return data


def wake_tool(context: Context, arguments: JsonObject) -> Done:
    """`singularity_sanctum_wake`: the current wake text (identity bodies elided if too large)."""
    woken = context.wake(True)
    content = {"mode": woken.mode, "wake": woken.text}
    if len(compact(content).encode("utf-8")) > MAX_OUTPUT_BYTES - 1024:
        woken = context.wake(False)
        content = {"mode": woken.mode, "wake": woken.text}
    return Done(Outcome.success(content))


def list_tool(context: Context, arguments: JsonObject) -> Done:
    """`singularity_sanctum_list`: a folder's entries with file counts and sizes."""
    try:
        text = optional_text(arguments, "folder", MAX_PATH_BYTES)
        parts = parts_of(text) if text is not None else ()
        entries = context.store.entries(parts)
    except (SanctumRefusal, ToolArgumentError) as refusal:
        return failed(refusal)
    dirs = sorted(e.name for e in entries if e.kind == "dir")
    files = {e.name: e for e in entries if e.kind == "file" and not _hidden(parts, e.name)}
    others = sorted(e.name for e in entries if e.kind == "other")
    folder = "/".join(parts) + "/" if parts else ""
    ordered = [("dir", name) for name in dirs]
    ordered += [
        ("file", found.name)
        for found in search.newest_first(
            [Found(folder, e.name, name_date(e.name), e.mtime_ns) for e in files.values()]
        )
    ]
    ordered += [("other", name) for name in others]
    shown: list[JsonObject] = []
    for kind, name in ordered[:MAX_ENTRIES]:
        if kind == "dir":
            count = sum(1 for e in context.store.entries((*parts, name)) if e.kind == "file")
            shown.append({"name": f"{name}/", "type": "dir", "files": count})
        elif kind == "file":
            shown.append({"name": name, "type": "file", "bytes": files[name].size})
        else:
            shown.append({"name": name, "type": "other"})
    return Done(
        Outcome.success(
            {
                "folder": folder,
                "entries": shown,
                "total": len(ordered),
                "truncated": len(ordered) > MAX_ENTRIES,
            }
        )
    )


def _hidden(parts: tuple[str, ...], name: str) -> bool:
    return name.startswith(".singularity-") or (parts == (MEMORY,) and name == TENDED)


def grep_tool(context: Context, arguments: JsonObject) -> Done:
    """`singularity_sanctum_grep`: case-insensitive substring hits, newest dated files first."""
    try:
        query = required_text(arguments, "query", MAX_QUERY_BYTES)
        text = optional_text(arguments, "folder", MAX_PATH_BYTES)
        parts = parts_of(text) if text is not None else (MEMORY,)
        if not context.store.exists(parts):
            raise SanctumRefusal("sanctum_not_found", "no such folder in the sanctum")
        hits, truncated = search.grep(context.store, parts, query, MAX_HITS, MAX_HIT_CHARS)
    except (SanctumRefusal, ToolArgumentError) as refusal:
        return failed(refusal)
    return Done(Outcome.success({"hits": hits, "truncated": truncated}))


def read_tool(context: Context, arguments: JsonObject) -> Done:
    """`singularity_sanctum_read`: a file's text (at most 256 KiB), 24 KiB at a time."""
    try:
        text, parts = path_argument(arguments)
        offset = arguments.get("offset", 0)
        if offset is None:
            offset = 0
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ToolArgumentError("offset is invalid")
        data = context.store.read_bytes(parts, MAX_READ_BYTES)
        data.decode("utf-8")
        if offset > len(data) or (offset < len(data) and data[offset] & 0xC0 == 0x80):
            raise ToolArgumentError("offset is invalid")
    except (SanctumRefusal, ToolArgumentError) as refusal:
        return failed(refusal)
    except UnicodeDecodeError:
        return failed(SanctumRefusal("sanctum_io", "file is not UTF-8 text"))
    end = min(len(data), offset + READ_WINDOW)
    while end < len(data) and data[end] & 0xC0 == 0x80:
        end -= 1  # never cut a character in two
    content = data[offset:end].decode("utf-8")
    return Done(
        Outcome.success(
            {
                "path": text,
                "content": content,
                "bytes": len(data),
                "offset": offset,
                "next_offset": end if end < len(data) else None,
            }
        )
    )
