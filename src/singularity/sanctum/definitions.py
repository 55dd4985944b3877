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


WAKE = _tool("wake", "Show your sanctum's wake text again: identity files and memory map", [])
LIST = _tool(
    "list",
    "List a folder of your sanctum, your own memory files, not the workspace: entries with "
    "file counts and sizes (default: the root)",
    [],
    folder=_TEXT,
)
GREP = _tool(
    "grep",
    "Search your sanctum's memory files for text, any case: under folder, memory/ unless "
    "given, newest dated files first",
    ["query"],
    query=_TEXT,
    folder=_TEXT,
)
READ = _tool(
    "read",
    "Read one of your sanctum's identity or memory files, not a workspace file: 24 KiB "
    "from offset",
    ["path"],
    path=_TEXT,
    offset={"type": "integer", "minimum": 0},
)
WRITE = _tool(
    "write",
    "Create or replace a sanctum file: an identity file, memory/<kind>/<slug>.md, "
    "memory/<kind>/YYYY-MM-DD-<slug>.md or capabilities/<slug>.md",
    ["path", "content"],
    path=_TEXT,
    content=_TEXT,
)
HISTORY = _tool(
    "history",
    "Add a dated line under ## History of a standing memory file",
    ["path", "line"],
    path=_TEXT,
    line=_TEXT,
)
INTAKE = _tool(
    "intake",
    "Keep source material as given, to distil into memory files later: a new file in raw/, "
    "written once",
    ["area", "descriptor", "content"],
    area=_TEXT,
    descriptor=_TEXT,
    content=_TEXT,
    ext=_TEXT,
)
DISTILLED = _tool(
    "distilled",
    "Mark a raw file distilled into files opening with source: raw/<file>",
    ["raw", "files"],
    raw=_TEXT,
    files={"type": "array", "items": _TEXT},
)
MERGE = _tool(
    "merge",
    "Merge two memory files: keep gets content, drop is removed",
    ["keep", "drop", "content"],
    keep=_TEXT,
    drop=_TEXT,
    content=_TEXT,
)
PENDING = _tool(
    "pending",
    "Add a line to memory/pending.md, or clear it",
    ["action"],
    action={"type": "string", "enum": ["add", "clear"]},
    line=_TEXT,
)
TENDED = _tool(
    "tended",
    "Only after a tending pass the Sanctum section asked for: stamp memory/.tended",
    [],
)
DEFINITIONS = (WAKE, LIST, GREP, READ, WRITE, HISTORY, INTAKE, DISTILLED, MERGE, PENDING, TENDED)
