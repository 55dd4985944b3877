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
from typing import Annotated, Any

from singularity.jsoncodec import compact
from singularity.sanctum import search
from singularity.sanctum.descriptors import MAX_READ_BYTES
from singularity.sanctum.names import (
    MEMORY,
    TENDED,
    SanctumRefusal,
    name_date,
)
from singularity.sanctum.seam import Sanctum
from singularity.sanctum.search import Found
from singularity.sanctum.store import parts_of
from singularity.sanctum.wake import Wake
from singularity.tools.arguments import Content, Integer, Text
from singularity.tools.base import JsonObject, Outcome, ToolArgumentError, ToolDefinition
from singularity.tools.boundary import MAX_OUTPUT_BYTES
from singularity.tools.typed import TypedTool, tool

MAX_PATH_BYTES = 4096
MAX_QUERY_BYTES = 1024
MAX_HITS = 50
MAX_HIT_CHARS = 300
MAX_ENTRIES = 200
READ_WINDOW = 24 * 1024
MAX_CONTENT_BYTES = 64 * 1024


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

    store: Sanctum
    today: Callable[[], str]
    wake: Callable[[bool], Wake]
    """The wake text; the argument asks for the identity bodies."""


def failed(refusal: SanctumRefusal | ToolArgumentError) -> Done:
    """A refusal as a failed outcome; nothing was changed."""
    if isinstance(refusal, SanctumRefusal):
        return Done(Outcome.failed(refusal.code, refusal.message))
    return Done(Outcome.failed(refusal.error_code, refusal.message))


class SanctumTool:
    """A sanctum tool made from a typed function (`singularity.tools.typed`): it runs on a
    `Context` and returns a `Done`, a refusal or an argument error as a failed one."""

    def __init__(self, typed: TypedTool[Context, Done]) -> None:
        self.typed = typed

    @property
    def definition(self) -> ToolDefinition:
        return self.typed.definition

    def __call__(self, context: Context, arguments: JsonObject) -> Done:
        try:
            return self.typed(context, arguments)
        except (SanctumRefusal, ToolArgumentError) as refusal:
            return failed(refusal)


def sanctum_tool(name: str, description: str) -> Callable[[Callable[..., Done]], SanctumTool]:
    """Make `singularity_sanctum_<name>` of a typed function on a `Context`."""

    def decorate(function: Callable[..., Done]) -> SanctumTool:
        return SanctumTool(tool(f"singularity_sanctum_{name}", description)(function))

    return decorate


Path = Annotated[str, Text(MAX_PATH_BYTES)]
Folder = Annotated[str | None, Text(MAX_PATH_BYTES)]
FileContent = Annotated[bytes, Content(MAX_CONTENT_BYTES, blank=False)]


def path_parts(text: str) -> tuple[str, ...]:
    """The components of a path given as text (an argument error if it is no path text)."""
    return parts_of(Text(MAX_PATH_BYTES).parse("path", text))


@sanctum_tool("wake", "Show your sanctum's wake text again: identity files and memory map")
def wake_tool(context: Context) -> Done:
    """`singularity_sanctum_wake`: the current wake text (identity bodies elided if too large)."""
    woken = context.wake(True)
    content = {"mode": woken.mode, "wake": woken.text}
    if len(compact(content).encode("utf-8")) > MAX_OUTPUT_BYTES - 1024:
        woken = context.wake(False)
        content = {"mode": woken.mode, "wake": woken.text}
    return Done(Outcome.success(content))


@sanctum_tool(
    "list",
    "List a folder of your sanctum, your own memory files, not the workspace: entries with "
    "file counts and sizes (default: the root)",
)
def list_tool(context: Context, *, folder: Folder = None) -> Done:
    """`singularity_sanctum_list`: a folder's entries with file counts and sizes."""
    parts = parts_of(folder) if folder is not None else ()
    entries = context.store.entries(parts)
    dirs = sorted(e.name for e in entries if e.kind == "dir")
    files = {e.name: e for e in entries if e.kind == "file" and not _hidden(parts, e.name)}
    others = sorted(e.name for e in entries if e.kind == "other")
    shown_folder = "/".join(parts) + "/" if parts else ""
    ordered = [("dir", name) for name in dirs]
    ordered += [
        ("file", found.name)
        for found in search.newest_first(
            [Found(shown_folder, e.name, name_date(e.name), e.mtime_ns) for e in files.values()]
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
                "folder": shown_folder,
                "entries": shown,
                "total": len(ordered),
                "truncated": len(ordered) > MAX_ENTRIES,
            }
        )
    )


def _hidden(parts: tuple[str, ...], name: str) -> bool:
    return name.startswith(".singularity-") or (parts == (MEMORY,) and name == TENDED)


@sanctum_tool(
    "grep",
    "Search your sanctum's memory files for text, any case: under folder, memory/ unless "
    "given, newest dated files first",
)
def grep_tool(
    context: Context, *, query: Annotated[str, Text(MAX_QUERY_BYTES)], folder: Folder = None
) -> Done:
    """`singularity_sanctum_grep`: case-insensitive substring hits, newest dated files first."""
    parts = parts_of(folder) if folder is not None else (MEMORY,)
    if not context.store.exists(parts):
        raise SanctumRefusal("sanctum_not_found", "no such folder in the sanctum")
    hits, truncated = search.grep(context.store, parts, query, MAX_HITS, MAX_HIT_CHARS)
    return Done(Outcome.success({"hits": hits, "truncated": truncated}))


@sanctum_tool(
    "read",
    "Read one of your sanctum's identity or memory files, not a workspace file: 24 KiB from offset",
)
def read_tool(
    context: Context, *, path: Path, offset: Annotated[int | None, Integer(0)] = None
) -> Done:
    """`singularity_sanctum_read`: a file's text (at most 256 KiB), 24 KiB at a time."""
    offset = offset or 0
    data = context.store.read_bytes(parts_of(path), MAX_READ_BYTES)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise SanctumRefusal("sanctum_io", "file is not UTF-8 text") from None
    if offset > len(data) or (offset < len(data) and data[offset] & 0xC0 == 0x80):
        raise ToolArgumentError("offset is invalid")
    end = min(len(data), offset + READ_WINDOW)
    while end < len(data) and data[end] & 0xC0 == 0x80:
        end -= 1  # never cut a character in two
    content = data[offset:end].decode("utf-8")
    return Done(
        Outcome.success(
            {
                "path": path,
                "content": content,
                "bytes": len(data),
                "offset": offset,
                "next_offset": end if end < len(data) else None,
            }
        )
    )
