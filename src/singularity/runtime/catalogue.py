"""The built-in tool definitions in the order of spec §10.1, for listing and for tests."""

from __future__ import annotations

import os

from singularity.domain.state import AgentState
from singularity.runtime.children import SPAWN_CHILD
from singularity.timestamps import Clock, system_clock
from singularity.tools.base import ToolDefinition, Toolset
from singularity.tools.confinement import Workspace
from singularity.tools.files import file_tools
from singularity.tools.model_tool import SWITCH_MODEL
from singularity.tools.self_tools import (
    ADD_LEARNING,
    ADD_RULE,
    RECALL,
    REMEMBER,
    SET_PROMPT,
    memory_and_self_tools,
)


def mind_toolsets(state: AgentState, clock: Clock = system_clock) -> list[Toolset]:
    """The memory and self tools alone (they need nothing but the being's state)."""
    return [memory_and_self_tools(state, clock)]


def builtin_definitions() -> list[ToolDefinition]:
    """The nine built-in definitions, in catalogue order."""
    with Workspace(os.getcwd()) as workspace:
        files = [tool.definition for tool in file_tools(workspace)]
    return [REMEMBER, RECALL, SET_PROMPT, ADD_RULE, ADD_LEARNING, SWITCH_MODEL, SPAWN_CHILD, *files]
