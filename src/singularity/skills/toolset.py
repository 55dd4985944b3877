"""The tools of one MCP server as a `Toolset`, with the outcome mapping of spec §13.4.

A result with `isError: true` is a failed `remote_tool` outcome; any other result is a
success; both carry the whole MCP result as content, so the output boundary and the
trusted-revenue search see exactly what the server sent. A transport or protocol
failure, or a missed deadline, is an indeterminate `mcp` outcome: the call may have
taken effect, so it is shown to the model and never replayed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from singularity.skills.host import SkillHost
from singularity.skills.session import RemoteTool
from singularity.tools.base import JsonObject, Outcome, Status, ToolDefinition

log = logging.getLogger(__name__)
Warn = Callable[[str], None]


def log_warning(text: str) -> None:
    """The default sink of skill warnings: the log."""
    log.warning("%s", text)


class McpToolset:
    """The tools one skill server listed, named `<surface>__<tool>` (Las: as listed)."""

    def __init__(
        self,
        host: SkillHost,
        index: int,
        surface: str | None,
        tools: Sequence[RemoteTool],
        warn: Warn = log_warning,
    ) -> None:
        self._host = host
        self._index = index
        self.warn = warn
        self._remote: dict[str, str] = {}
        self._definitions: list[ToolDefinition] = []
        for tool in tools:
            name = tool.name if surface is None else f"{surface}__{tool.name}"
            self._remote.setdefault(name, tool.name)
            self._definitions.append(ToolDefinition(name, tool.description, tool.input_schema))

    def definitions(self) -> Sequence[ToolDefinition]:
        """The tools in the order the server listed them."""
        return list(self._definitions)

    async def call(self, name: str, arguments: JsonObject) -> Outcome:
        """Call the tool on its server and map the result."""
        report = await self._host.call(self._index, self._remote[name], arguments)
        for notice in report.notices:
            self.warn(f"mcp: {notice}")
        if report.error is not None:
            return Outcome.indeterminate("mcp", str(report.error))
        return outcome_of(report.result or {})


def outcome_of(result: dict[str, Any]) -> Outcome:
    """Spec §13.4: `isError: true` → failed `remote_tool`; else success; content = the result."""
    if result.get("isError") is True:
        return Outcome(Status.FAILED, result, "remote_tool")
    return Outcome.success(result)
