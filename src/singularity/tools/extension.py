"""Extensions: built-in parts of a being (the sanctum, the private journal) that add tools,
prompt sections and work at cycle boundaries, without the cycle knowing them by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from singularity.domain.events import ActivityEvent
from singularity.domain.state import AgentState
from singularity.tools.base import Toolset


class BeingHandle(Protocol):
    """What a built-in part may do with the living being (the runtime's LiveBeing)."""

    @property
    def state(self) -> AgentState: ...

    def now(self) -> str:
        """The current time, rendered."""
        ...

    def journal(self, record: ActivityEvent) -> None:
        """Append an event to the activity journal, durable with the next save."""
        ...

    def save(self) -> None:
        """Save the being durably."""
        ...


class CycleSummary(Protocol):
    """What an extension may read of a finished cycle's report."""

    @property
    def cycle(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def actions(self) -> list[str]: ...


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

    def before_check(self) -> None:
        """Before a cycle's solvency check, which builds its first request: the cycle
        boundary, where a part stops trusting what it cached of the world outside."""

    async def before_cycle(self) -> None:
        """Before a cycle's framing message."""

    async def after_cycle(self, report: CycleSummary) -> None:
        """After a cycle ended (completed, round limit, exhausted or cancelled)."""

    async def at_stop(self) -> None:
        """During shutdown, before the final save."""
