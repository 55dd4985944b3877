"""The eleven sanctum tools, in catalogue order."""

from __future__ import annotations

from singularity.sanctum import tools, writing

SANCTUM_TOOLS = (
    tools.wake_tool,
    tools.list_tool,
    tools.grep_tool,
    tools.read_tool,
    writing.write_tool,
    writing.history_tool,
    writing.intake_tool,
    writing.distilled_tool,
    writing.merge_tool,
    writing.pending_tool,
    writing.tended_tool,
)
DEFINITIONS = tuple(each.definition for each in SANCTUM_TOOLS)
