"""What the one living loop is given: when the next step comes, and what a step is.

`Runtime.live` is the only loop. Its schedule says how long to wait before a step, lives
the step, counts it and says how long to rest after it. `Cycles` (`run`) lives a cycle and
rests the cycle interval, longer after failures (decision 25). `PulseSchedule`
(`run --pulse`) lives a pulse whenever one is due and the hour is not quiet. `Once`
(`once`, `pulse --once`) lives one cycle or one pulse now, and raises its failure.

A pulse is one cycle lived with `MODE: PULSE` in the sanctum section, at most
`pulse_max_rounds` model rounds, and a cost cap: before each model call the pulse stops
(status `cost_cap`) when what it spent plus the call's worst case would pass
`pulse_max_cost`. `pulse_started` and `pulse_finished` are journaled around it.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar, Protocol

from singularity.domain import events
from singularity.money import add, render_money, sub
from singularity.runtime.being import LiveBeing
from singularity.runtime.loop.cycle import CycleReport, Life
from singularity.runtime.loop.sanctum import find_sanctum

log = logging.getLogger(__name__)
MAX_WAIT_SECS = 60.0
"""The longest a pulse schedule waits before it looks at the clock and `PULSE.md` again."""
ENDING = frozenset({"budget_exhausted", "cancelled"})


class Living(Protocol):
    """What a schedule uses of a booted being (`Runtime`)."""

    @property
    def being(self) -> LiveBeing: ...

    @property
    def life(self) -> Life: ...

    async def live_one(self, life: Life | None = None) -> CycleReport:
        """One cycle with the extensions' hooks around it (`life`: a capped copy)."""
        ...

    def next_wait(self) -> float:
        """Seconds before the next cycle, longer after failures."""
        ...


class Lived(Protocol):
    """How a step went: a cycle's report, or a pulse's."""

    @property
    def status(self) -> str:
        """The step's status (`completed`, `budget_exhausted`, …)."""
        ...

    @property
    def final_content(self) -> str | None:
        """The being's closing text, if the step ended with one."""
        ...


class LoopSchedule(Protocol):
    """When the loop's steps come and what each one is."""

    @property
    def single(self) -> bool:
        """One step a command asked for: lived even when paused or stopped, its failure
        raised rather than tolerated."""
        ...

    @property
    def over(self) -> bool:
        """Whether the loop has lived all it was asked to."""
        ...

    def wait(self, living: Living) -> float:
        """Seconds until the next step may start; 0 when it may start now."""
        ...

    async def step(self, living: Living) -> Lived:
        """Live one step now."""
        ...

    def lived(self, outcome: Lived | None) -> None:
        """Count a step (`None`: it failed and was tolerated)."""
        ...

    def rest(self, living: Living) -> float:
        """Seconds to rest after a step."""
        ...


@dataclass
class Limited:
    """A schedule of `limit` steps at most, over early when a step ends the loop."""

    single: ClassVar[bool] = False

    limit: int | None = None
    count: int = 0
    ended: bool = False
    """A step found the being unable to pay, or stopped."""

    @property
    def over(self) -> bool:
        """Whether `limit` steps were lived or the last one ended the loop."""
        return self.ended or (self.limit is not None and self.count >= self.limit)


@dataclass
class Cycles(Limited):
    """Cycles one after the other, `limit` of them at most (`run --max-cycles`)."""

    def wait(self, living: Living) -> float:
        """A cycle may always start at once: the rest comes after the one before."""
        return 0.0

    async def step(self, living: Living) -> CycleReport:
        """Live one cycle and log how it went."""
        report = await living.live_one()
        log.info(
            "cycle %d %s; balance %s USD, earned %s USD",
            report.cycle,
            report.status,
            report.balance_usd,
            report.earned_usd,
        )
        return report

    def lived(self, outcome: Lived | None) -> None:
        """Count the cycle: one that failed and was tolerated counts too."""
        if outcome is not None and outcome.status in ENDING:
            self.ended = True
        self.count += 1

    def rest(self, living: Living) -> float:
        """The cycle interval, doubled for each failure in a row."""
        return living.next_wait()


@dataclass(frozen=True)
class PulseReport:
    """How a pulse went: `skipped` (quiet hours), a cycle status, `cost_cap` or `round_cap`."""

    status: str
    cycle: int
    cost_usd: str
    reason: str | None = None
    report: CycleReport | None = None

    @property
    def final_content(self) -> str | None:
        """The being's closing text, when the pulse lived a cycle that ended with one."""
        return None if self.report is None else self.report.final_content

    def to_json(self) -> dict[str, Any]:
        """The report for `singularity pulse --once`."""
        return {
            "pulse": self.status,
            "cycle": self.cycle,
            "cost_usd": self.cost_usd,
            "reason": self.reason,
            "report": None if self.report is None else self.report.to_json(),
        }


@dataclass
class PulseSchedule(Limited):
    """Pulses whenever one is due outside quiet hours, `limit` of them at most."""

    def wait(self, living: Living) -> float:
        """0 when a pulse is due and the hour is not quiet; else how long to look away."""
        sanctum = find_sanctum(living.life.extensions)
        sanctum.open()
        now = living.being.clock()
        schedule = sanctum.schedule()
        start = schedule.next_start(sanctum.last_pulse, now)
        if start > now or schedule.quiet_at(now) is not None:
            return min(MAX_WAIT_SECS, max(1.0, (start - now).total_seconds()))
        return 0.0

    async def step(self, living: Living) -> PulseReport:
        """Live one pulse."""
        return await live_pulse(living)

    def lived(self, outcome: Lived | None) -> None:
        """Count the pulse: one that failed and was tolerated counts too."""
        if outcome is not None and outcome.status == "budget_exhausted":
            self.ended = True
        self.count += 1

    def rest(self, living: Living) -> float:
        """No rest: the next pulse waits for its time."""
        return 0.0


@dataclass
class Once:
    """One cycle (a pulse, with `pulse`) now, then over; `outcome` is how it went."""

    pulse: bool = False
    outcome: Lived | None = None
    single: ClassVar[bool] = True

    @property
    def over(self) -> bool:
        """Whether the step was lived."""
        return self.outcome is not None

    def wait(self, living: Living) -> float:
        """Now: whether a pulse is due is the command's to check."""
        return 0.0

    async def step(self, living: Living) -> Lived:
        """Live the cycle or the pulse."""
        return await live_pulse(living) if self.pulse else await living.live_one()

    def lived(self, outcome: Lived | None) -> None:
        """Keep how the step went (a single step's failure is raised, never counted)."""
        self.outcome = outcome

    def rest(self, living: Living) -> float:
        """No rest: the loop is over."""
        return 0.0


def schedule_for(pulse: bool, limit: int | None = None) -> Cycles | PulseSchedule:
    """The schedule of a being in Pulse mode or not."""
    return PulseSchedule(limit) if pulse else Cycles(limit)


def _spent(being: LiveBeing) -> Decimal:
    budget = being.state.budget
    return add(budget.api_spent, budget.instance_spent)


@dataclass
class CostCap:
    """A pulse's cost cap, asked before each model call of its cycle."""

    being: LiveBeing
    max_cost: Decimal
    before: Decimal
    hit: bool = field(default=False)

    def __call__(self, worst_case: Decimal) -> bool:
        """Whether a call costing at most `worst_case` stays under the cap."""
        if add(sub(_spent(self.being), self.before), worst_case) > self.max_cost:
            self.hit = True
            return False
        return True


async def live_pulse(living: Living) -> PulseReport:
    """Live one pulse now (quiet hours are the caller's to check)."""
    sanctum = find_sanctum(living.life.extensions)
    sanctum.open()
    limits = sanctum.config.limits
    being = living.being
    base = living.life
    cap = CostCap(being, limits.max_cost, _spent(being))
    life = dataclasses.replace(
        base,
        limits=dataclasses.replace(base.limits, max_tool_rounds=limits.max_rounds),
        may_spend=cap,
    )
    being.journal(
        events.PulseStarted(being.now(), being.state.cycle + 1, limits.max_rounds, limits.max_cost)
    )
    sanctum.with_pulse(limits)
    status = "failed"
    report: CycleReport | None = None
    try:
        report = await living.live_one(life)
        status = report.status
        if cap.hit and status == "cancelled" and not base.stop_requested():
            status = "cost_cap"
        elif status == "tool_round_limit":
            status = "round_cap"
    finally:
        sanctum.with_pulse(None)
        cost = sub(_spent(being), cap.before)
        being.journal(events.PulseFinished(being.now(), being.state.cycle, status, cost))
        being.save()
    return PulseReport(status, being.state.cycle, render_money(cost), report=report)
