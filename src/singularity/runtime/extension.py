"""Extensions: built-in parts of a being (the sanctum, the private journal) that add tools,
prompt sections and work at cycle boundaries, without the cycle knowing them by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from singularity.tools.base import Toolset

if TYPE_CHECKING:
    from singularity.runtime.cycle import CycleReport


class Extension:
    """A part of a being with hooks; every hook does nothing unless overridden."""

    def toolsets(self) -> Sequence[Toolset]:
        """Tools this extension adds, placed after the built-ins."""
        return ()

    def prompt_section(self) -> str:
        """Text appended to the system message after the mind's sections ("" for none)."""
        return ""

    async def at_boot(self) -> None:
        """Once the being is open and saved `running`."""

    async def before_cycle(self) -> None:
        """Before a cycle's framing message."""

    async def after_cycle(self, report: CycleReport) -> None:
        """After a cycle ended (completed, round limit, exhausted or cancelled)."""

    async def at_stop(self) -> None:
        """During shutdown, before the final save."""
