"""The definitions of the eleven sanctum tools, in catalogue order."""

from __future__ import annotations

from singularity.tools.base import JsonObject, ToolDefinition, object_schema

_TEXT: JsonObject = {"type": "string"}


def _tool(
    name: str, description: str, required: list[str], **properties: JsonObject
) -> ToolDefinition:
    return ToolDefinition(
        f"singularity_sanctum_{name}", description, object_schema(properties, required)
    )


WAKE = _tool("wake", "Return your sanctum's wake text: identity files and the memory map", [])
LIST = _tool(
    "list",
    "List a sanctum folder (default: the sanctum root) with file counts and sizes",
    [],
    folder=_TEXT,
)
GREP = _tool(
    "grep",
    "Find text, case-insensitively, in the files under a sanctum folder (default memory; "
    "raw on request); up to 50 path:line hits, newest dated files first",
    ["query"],
    query=_TEXT,
    folder=_TEXT,
)
READ = _tool(
    "read",
    "Read one sanctum file, 24 KiB at a time from a byte offset",
    ["path"],
    path=_TEXT,
    offset={"type": "integer", "minimum": 0},
)
WRITE = _tool(
    "write",
    "Create or replace one sanctum file: an identity file (replace only), PULSE.md, "
    "memory/<kind>/<slug>.md (standing subject), memory/<kind>/YYYY-MM-DD-<slug>.md "
    "(event, session note), memory/<slug>.md or capabilities/<slug>.md",
    ["path", "content"],
    path=_TEXT,
    content=_TEXT,
)
HISTORY = _tool(
    "history",
    "Add one dated line under ## History of a standing memory file, at a turning point",
    ["path", "line"],
    path=_TEXT,
    line=_TEXT,
)
INTAKE = _tool(
    "intake",
    "Keep material as given in raw/YYYY-MM-DD-<area>-<descriptor>.<ext> (default ext md), "
    "written once, with status: raw",
    ["area", "descriptor", "content"],
    area=_TEXT,
    descriptor=_TEXT,
    content=_TEXT,
    ext=_TEXT,
)
DISTILLED = _tool(
    "distilled",
    "Mark a raw file distilled into memory files that each open with source: raw/<file>",
    ["raw", "files"],
    raw=_TEXT,
    files={"type": "array", "items": _TEXT},
)
MERGE = _tool(
    "merge",
    "Merge two memory files about one subject: keep gets content (History lines of both "
    "are kept), drop is removed",
    ["keep", "drop", "content"],
    keep=_TEXT,
    drop=_TEXT,
    content=_TEXT,
)
PENDING = _tool(
    "pending",
    "Add a line to memory/pending.md (what to raise next time), or clear it",
    ["action"],
    action={"type": "string", "enum": ["add", "clear"]},
    line=_TEXT,
)
TENDED = _tool(
    "tended",
    "Stamp memory/.tended with today's date after a tending pass; returns the map's counts",
    [],
)
DEFINITIONS = (WAKE, LIST, GREP, READ, WRITE, HISTORY, INTAKE, DISTILLED, MERGE, PENDING, TENDED)
