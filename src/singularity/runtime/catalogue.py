"""Building a being's tool catalogue in the order of spec §10.1."""

from __future__ import annotations

from decimal import Decimal

from singularity.config import resolve
from singularity.domain.identity import identity_from
from singularity.domain.state import AgentState
from singularity.timestamps import Clock, now_text, system_clock
from singularity.tools.base import Toolset
from singularity.tools.catalogue import Catalogue
from singularity.tools.self_tools import memory_and_self_tools


def builtin_toolsets(state: AgentState, clock: Clock = system_clock) -> list[Toolset]:
    """The built-in toolsets, in catalogue order."""
    return [memory_and_self_tools(state, clock)]


def builtin_catalogue() -> Catalogue:
    """The built-ins alone, over a throwaway being: for listing definitions."""
    settings = resolve({}, environ={})
    state = AgentState.new(identity_from(settings), "any", Decimal(0), now_text())
    return Catalogue(builtin_toolsets(state))
