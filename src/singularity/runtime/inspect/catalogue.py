"""The tool definitions a being is offered, in catalogue order, for listing and for tests.

Boot registers skills, then Most's tools (with a Most token), then the nine built-ins
of spec §10.1, then the tools of the being's built-in parts: the sanctum's and the
journal's (reasoning log included). `offered_definitions` lists the same without
booting a being; a test holds the two to each other.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from singularity.domain.state import AgentState
from singularity.journal import tools as journal_tools
from singularity.most import tools as most_tools
from singularity.runtime.family.children import SPAWN_CHILD
from singularity.sanctum import definitions as sanctum_tools
from singularity.timestamps import Clock, system_clock
from singularity.tools.base import ToolDefinition, Toolset
from singularity.tools.confinement import Workspace
from singularity.tools.files import file_tools
from singularity.tools.model_tool import SWITCH_MODEL
from singularity.tools.self_tools import MIND_TOOLS, memory_and_self_tools


def mind_toolsets(state: AgentState, clock: Clock = system_clock) -> list[Toolset]:
    """The memory and self tools alone (they need nothing but the being's state)."""
    return [memory_and_self_tools(state, clock)]


def builtin_definitions() -> list[ToolDefinition]:
    """The nine built-in definitions, in catalogue order."""
    with Workspace(os.getcwd()) as workspace:
        files = [tool.definition for tool in file_tools(workspace)]
    mind = [each.definition for each in MIND_TOOLS]
    return [*mind, SWITCH_MODEL, SPAWN_CHILD, *files]


def part_definitions() -> list[ToolDefinition]:
    """The tools of the being's built-in parts: the sanctum's, then the journal's."""
    return [*sanctum_tools.DEFINITIONS, *journal_tools.DEFINITIONS]


def offered_definitions(
    skills: Sequence[ToolDefinition], *, with_most: bool
) -> list[ToolDefinition]:
    """Every tool a being booted with these skills is offered, in catalogue order."""
    most = list(most_tools.DEFINITIONS) if with_most else []
    return [*skills, *most, *builtin_definitions(), *part_definitions()]
