"""The sanctum tools that change files: write, history, intake, distilled, merge, pending,
tended. Each enforces its naming rule before it touches the disk, so a refusal changes
nothing; every change is one durable replace (or create, or removal).
"""

from __future__ import annotations

import re
from typing import Annotated

from singularity.sanctum.descriptors import MAX_READ_BYTES
from singularity.sanctum.names import (
    HISTORY,
    MEMORY,
    NAME,
    NOT_FOUND,
    PENDING,
    RAW,
    SESSIONS,
    SOURCE,
    TENDED,
    TOO_LARGE,
    WRITE_ONCE,
    SanctumRefusal,
    Target,
    raw_name,
    standing_target,
    unless_missing,
    write_target,
)
from singularity.sanctum.store import parts_of
from singularity.sanctum.tools import (
    MAX_CONTENT_BYTES,
    MAX_PATH_BYTES,
    Context,
    Done,
    FileContent,
    Path,
    sanctum_tool,
)
from singularity.sanctum.wake import scan_map
from singularity.tools.arguments import Choice, Text, TextList
from singularity.tools.base import Outcome, ToolArgumentError

MAX_LINE_BYTES = 512
MAX_SLUG_BYTES = 64
MAX_DISTILLED_FILES = 50
MAX_EXT_BYTES = 16
RAW_FRONTMATTER = "---\nstatus: raw\ndistilled_to: []\n---\n"
_HISTORY_HEADING = re.compile(r"##\s+History\s*", re.IGNORECASE)
_SECTION_END = re.compile(r"#{1,2}\s")
Line = Annotated[str, Text(MAX_LINE_BYTES)]
Slug = Annotated[str, Text(MAX_SLUG_BYTES)]


def split_history(text: str) -> tuple[str, str | None]:
    """The text without its `## History` section, and that section (heading included)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _HISTORY_HEADING.fullmatch(line)), None)
    if start is None:
        return text, None
    end = next(
        (i for i in range(start + 1, len(lines)) if _SECTION_END.match(lines[i])), len(lines)
    )
    rest = "\n".join(lines[:start] + lines[end:]).rstrip()
    return rest, "\n".join(lines[start:end]).rstrip()


def history_lines(section: str | None) -> list[str]:
    """The dated lines of a History section."""
    if section is None:
        return []
    return [line for line in section.splitlines()[1:] if line.strip()]


def with_history(text: str, lines: list[str]) -> str:
    """`text` with a History section of `lines` at its end (none when there are none)."""
    body = text.rstrip() + "\n"
    if not lines:
        return body
    return body + "\n## History\n\n" + "\n".join(lines) + "\n"


def _bounded(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > MAX_CONTENT_BYTES:
        raise SanctumRefusal(TOO_LARGE, "the file would be over 64 KiB; split it")
    return data


def target_of(context: Context, parts: tuple[str, ...]) -> Target:
    """What a write may change at `parts`: a path the naming rules allow, or a memory file a
    person made under a name of their own, which exists already (it can be replaced or
    merged, never created)."""
    try:
        return write_target(parts)
    except SanctumRefusal as refusal:
        if refusal.code != NAME or parts[0] != MEMORY or len(parts) < 2:
            raise
        if parts in ((MEMORY, PENDING), (MEMORY, TENDED)):
            raise  # they change only through their own tools
        if not context.store.is_file(parts):
            raise
        return Target(parts, "handmade")


def _existing_as_is(context: Context, target: Target) -> str | None:
    """A file's text however a person left it (bytes that are not UTF-8 as U+FFFD), or
    None when there is none."""
    head = unless_missing(lambda: context.store.read_head(target.parts, MAX_READ_BYTES))
    return None if head is None else head[0].decode("utf-8", "replace")


def _existing(context: Context, target: Target) -> str | None:
    return context.store.read_optional(target.parts, MAX_READ_BYTES)


@sanctum_tool(
    "write",
    "Create or replace a sanctum file: an identity file, memory/<kind>/<slug>.md, "
    "memory/<kind>/YYYY-MM-DD-<slug>.md or capabilities/<slug>.md",
)
def write_tool(context: Context, *, path: Path, content: FileContent) -> Done:
    """`singularity_sanctum_write`: create or replace one file under the naming rules."""
    parts = parts_of(path)
    target = target_of(context, parts)
    text = content.decode("utf-8")
    existing = _existing_as_is(context, target)
    if target.kind in ("identity", "pulse") and existing is None:
        raise SanctumRefusal(NOT_FOUND, f"{path} is replaced, never created (the runtime seeds it)")
    if target.kind == "standing":
        text = _keep_history(text, existing)
    data = _bounded(text)
    context.store.replace(parts, data)
    return Done(
        Outcome.success({"path": target.path, "bytes": len(data)}), [(target.path, len(data))]
    )


def _keep_history(content: str, existing: str | None) -> str:
    """A standing file's History survives a rewrite; only the history tool adds to it."""
    body, given = split_history(content)
    kept = history_lines(split_history(existing)[1]) if existing is not None else []
    if given is not None and history_lines(given) != kept:
        raise SanctumRefusal(
            HISTORY, "the ## History section changes only through singularity_sanctum_history"
        )
    return with_history(body, kept) if kept else content


@sanctum_tool("history", "Add a dated line under ## History of a standing memory file")
def history_tool(context: Context, *, path: Path, line: Line) -> Done:
    """`singularity_sanctum_history`: one dated line under `## History` of a standing file."""
    parts = parts_of(path)
    target = standing_target(parts)
    existing = _existing(context, target)
    if existing is None:
        raise SanctumRefusal(NOT_FOUND, f"{target.path} does not exist")
    body, section = split_history(existing)
    entry = f"- {context.today()}: {line}"
    data = _bounded(with_history(body, [*history_lines(section), entry]))
    context.store.replace(parts, data)
    return Done(Outcome.success({"path": target.path, "line": entry}), [(target.path, len(data))])


@sanctum_tool(
    "intake",
    "Keep source material as given, to distil into memory files later: a new file in raw/, "
    "written once",
)
def intake_tool(
    context: Context,
    *,
    area: Slug,
    descriptor: Slug,
    content: FileContent,
    ext: Annotated[str | None, Text(MAX_EXT_BYTES)] = None,
) -> Done:
    """`singularity_sanctum_intake`: material kept as given in `raw/`, written once."""
    name = raw_name(context.today(), area, descriptor, ext or "md")
    document = _bounded(RAW_FRONTMATTER + content.decode("utf-8"))
    if not context.store.create((RAW, name), document):
        raise SanctumRefusal(
            WRITE_ONCE, f"raw/{name} exists; raw files are written once (use a new descriptor)"
        )
    path = f"{RAW}/{name}"
    return Done(Outcome.success({"path": path, "bytes": len(document)}), [(path, len(document))])


def _memory_files(files: list[str]) -> list[str]:
    """The distinct memory files a distillation names, in the order given."""
    found: list[str] = []
    for item in files:
        parts = parts_of(item)
        target = write_target(parts)
        if parts[0] != MEMORY:
            raise SanctumRefusal(NAME, "distillations are memory files")
        if target.path not in found:
            found.append(target.path)
    return found


def _opens_with(text: str, line: str) -> bool:
    """Whether the file's first line is `line`, or its opening frontmatter holds it."""
    lines = [item.rstrip() for item in text.splitlines()]
    if lines and lines[0] == "---":
        end = next((i for i in range(1, len(lines)) if lines[i] == "---"), 0)
        return line in lines[1:end]
    first = next((item for item in lines if item.strip()), "")
    return first == line


@sanctum_tool("distilled", "Mark a raw file distilled into files opening with source: raw/<file>")
def distilled_tool(
    context: Context,
    *,
    raw: Path,
    files: Annotated[list[str], TextList(MAX_PATH_BYTES, 1, MAX_DISTILLED_FILES)],
) -> Done:
    """`singularity_sanctum_distilled`: mark a raw file distilled into the listed files."""
    raw_parts = parts_of(raw)
    if raw_parts[0] != RAW or len(raw_parts) < 2:
        raise SanctumRefusal(NAME, "raw names a file under raw/")
    made_files = _memory_files(files)
    raw_path = "/".join(raw_parts)
    raw_text = context.store.read_optional(raw_parts, MAX_READ_BYTES)
    if raw_text is None:
        raise SanctumRefusal(NOT_FOUND, f"{raw_path} does not exist")
    for path in made_files:
        made = context.store.read_optional(tuple(path.split("/")), MAX_READ_BYTES)
        if made is None:
            raise SanctumRefusal(NOT_FOUND, f"{path} does not exist")
        if not _opens_with(made, f"source: {raw_path}"):
            raise SanctumRefusal(SOURCE, f"{path} does not open with `source: {raw_path}`")
    updated, listed = mark_distilled(raw_text, made_files)
    data = _bounded(updated)
    context.store.replace(raw_parts, data)
    return Done(
        Outcome.success({"raw": raw_path, "status": "distilled", "distilled_to": listed}),
        [(raw_path, len(data))],
    )


def mark_distilled(raw: str, files: list[str]) -> tuple[str, list[str]]:
    """The raw text with `status: distilled` and `distilled_to` listing `files` (and earlier)."""
    lines = raw.split("\n")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), 0)
    if not lines or lines[0].rstrip() != "---" or not end:
        lines, end = ["---", "---", *lines], 1
    head = lines[1:end]
    earlier: list[str] = []
    for line in head:
        if line.startswith("distilled_to:"):
            inner = line.partition(":")[2].strip().strip("[]")
            earlier = [item.strip() for item in inner.split(",") if item.strip()]
    listed = earlier + [path for path in files if path not in earlier]
    head = [line for line in head if not line.startswith(("status:", "distilled_to:"))]
    head = ["status: distilled", f"distilled_to: [{', '.join(listed)}]", *head]
    return "\n".join(["---", *head, *lines[end:]]), listed


@sanctum_tool("merge", "Merge two memory files: keep gets content, drop is removed")
def merge_tool(context: Context, *, keep: Path, drop: Path, content: FileContent) -> Done:
    """`singularity_sanctum_merge`: `keep` takes the merged text, `drop` is removed."""
    keep_parts, drop_parts = parts_of(keep), parts_of(drop)
    kept, dropped = target_of(context, keep_parts), target_of(context, drop_parts)
    if kept.parts[0] != MEMORY or dropped.parts[0] != MEMORY:
        raise SanctumRefusal(NAME, "merge joins two memory files")
    if kept.path == dropped.path:
        raise SanctumRefusal(NAME, "keep and drop are the same file")
    if len(dropped.parts) >= 3 and dropped.parts[1] == SESSIONS:
        raise SanctumRefusal(NAME, "session notes are history; they are never merged away")
    old_keep, old_drop = _existing(context, kept), _existing(context, dropped)
    if old_keep is None or old_drop is None:
        missing = kept.path if old_keep is None else dropped.path
        raise SanctumRefusal(NOT_FOUND, f"{missing} does not exist")
    body, given = split_history(content.decode("utf-8"))
    if given is not None:
        raise SanctumRefusal(HISTORY, "leave ## History out: both files' History lines are kept")
    lines = history_lines(split_history(old_keep)[1])
    lines += [line for line in history_lines(split_history(old_drop)[1]) if line not in lines]
    merged = _bounded(with_history(body, sorted(lines, key=lambda line: line[:13])))
    context.store.replace(kept.parts, merged)
    context.store.remove(dropped.parts)
    return Done(
        Outcome.success({"keep": kept.path, "drop": dropped.path, "bytes": len(merged)}),
        [(kept.path, len(merged))],
        merged=(kept.path, dropped.path),
    )


@sanctum_tool("pending", "Add a line to memory/pending.md, or clear it")
def pending_tool(
    context: Context,
    *,
    action: Annotated[str, Choice(("add", "clear"))],
    line: Annotated[str | None, Text(MAX_LINE_BYTES)] = None,
) -> Done:
    """`singularity_sanctum_pending`: add a line to, or clear, `memory/pending.md`."""
    parts = (MEMORY, PENDING)
    existing = context.store.read_optional(parts, MAX_READ_BYTES) or ""
    if action == "add":
        if line is None:
            raise ToolArgumentError("line is invalid")
        text = (existing.rstrip() + "\n" if existing.strip() else "") + f"- {line}\n"
    else:
        text = ""
    data = _bounded(text)
    context.store.replace(parts, data)
    items = sum(1 for line in text.splitlines() if line.strip())
    path = "/".join(parts)
    return Done(Outcome.success({"path": path, "items": items}), [(path, len(data))])


@sanctum_tool(
    "tended", "Only after a tending pass the Sanctum section asked for: stamp memory/.tended"
)
def tended_tool(context: Context) -> Done:
    """`singularity_sanctum_tended`: stamp `memory/.tended` with today; the map's counts."""
    day = context.today()
    context.store.replace((MEMORY, TENDED), f"{day}\n".encode())
    counts = scan_map(context.store).counts()
    return Done(Outcome.success({"tended": day, **counts}), tended=(day, counts))
