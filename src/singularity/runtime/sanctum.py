"""The sanctum bound into a live being, and Pulse: scheduled quiet cycles under a cap.

A pulse is one cycle lived with `MODE: PULSE` in the sanctum section, at most
`pulse_max_rounds` model rounds, and a cost cap: before each model round the pulse
stops (status `cost_cap`) when what it spent plus the worst case of the next call would
pass `pulse_max_cost`. `pulse_started` and `pulse_finished` are journaled around it.
Quiet hours are the runtime's to enforce: no pulse starts inside them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from singularity.config import Settings
from singularity.domain import events
from singularity.domain.records import ChatMessage
from singularity.errors import (
    ConfigurationError,
    FatalIoError,
    SingularityError,
    StateError,
)
from singularity.money import add, render_money, sub
from singularity.runtime.being import LiveBeing, place_of
from singularity.runtime.cycle import CycleReport, Life, plan_call, request_messages
from singularity.runtime.extension import Extension
from singularity.sanctum.extension import SanctumConfig, SanctumCore
from singularity.sanctum.names import PULSE_FILE
from singularity.sanctum.pulse import QuietHours, Schedule, schedule_from
from singularity.sanctum.store import SanctumStore
from singularity.store.opening import peek_events_at
from singularity.timestamps import Clock, parse_timestamp, render_timestamp

if TYPE_CHECKING:
    from singularity.runtime.lifecycle import Runtime

MAX_WAIT_SECS = 60.0


class SanctumExtension(SanctumCore, Extension):
    """The sanctum as one of a being's extensions."""


def sanctum_extension(being: LiveBeing, settings: Settings) -> SanctumExtension:
    """The sanctum of a being booted with these settings."""
    return SanctumExtension(
        being, SanctumConfig.from_settings(settings), being.events_at_open
    )


def find_sanctum(extensions: Sequence[Extension]) -> SanctumExtension:
    """The sanctum among a being's extensions."""
    for extension in extensions:
        if isinstance(extension, SanctumExtension):
            return extension
    raise StateError("this being has no sanctum, which Pulse needs")


@dataclass(frozen=True)
class PulseReport:
    """How a pulse went: `skipped` (quiet hours), a cycle status, `cost_cap` or `round_cap`."""

    status: str
    cycle: int
    cost_usd: str
    reason: str | None = None
    report: CycleReport | None = None

    def to_json(self) -> dict[str, Any]:
        """The report for `singularity pulse --once`."""
        return {
            "pulse": self.status,
            "cycle": self.cycle,
            "cost_usd": self.cost_usd,
            "reason": self.reason,
            "report": None if self.report is None else self.report.to_json(),
        }


def pulse_schedule(settings: Settings) -> Schedule:
    """The pulse schedule: `PULSE.md` over the configuration, read without the lock."""
    config = SanctumConfig.from_settings(settings, pulse=True)
    text = None
    if os.path.isdir(config.root) and not os.path.islink(config.root):
        store = SanctumStore(config.root)
        try:
            text = store.read_optional((PULSE_FILE,))
        except SingularityError:
            text = None
        finally:
            store.close()
    return schedule_from(text, config.default_frequency, config.quiet)


def quiet_window(settings: Settings, clock: Clock) -> QuietHours | None:
    """The quiet hours holding the clock's now, read without locking or changing anything."""
    return pulse_schedule(settings).quiet_at(clock())


def last_pulse(settings: Settings) -> datetime | None:
    """When the being's last pulse finished, from its activity journal (read, not locked)."""
    try:
        events = peek_events_at(place_of(settings), settings.agent_id)
    except (FatalIoError, StateError, ValueError):
        return None  # the boot that follows says what is wrong with the being
    found = [e for e in events if e.get("type") == "pulse_finished"]
    try:
        return parse_timestamp(str(found[-1]["at"])) if found else None
    except ValueError:
        return None


def pulse_due(settings: Settings, clock: Clock) -> str | None:
    """Why no pulse may start now (quiet hours, or not due yet); None when one may."""
    schedule = pulse_schedule(settings)
    now = clock()
    window = schedule.quiet_at(now)
    if window is not None:
        return f"quiet hours {window.render()}"
    start = schedule.next_start(last_pulse(settings), now)
    if start > now:
        return f"not due until {render_timestamp(start)}"
    return None


def _spent(being: LiveBeing) -> Decimal:
    budget = being.state.budget
    return add(budget.api_spent, budget.instance_spent)


def _round_boundary(conversation: Sequence[ChatMessage]) -> bool:
    """Whether every tool call of the newest assistant message has its answer."""
    answered = 0
    for message in reversed(conversation):
        if message["role"] == "tool":
            answered += 1
        elif message["role"] == "assistant":
            return answered >= len(message.get("tool_calls", []))
        else:
            return True
    return True


def _worst_case(life: Life) -> Decimal:
    return plan_call(life, request_messages(life)).charge.total


async def live_pulse(runtime: Runtime) -> PulseReport:
    """Live one pulse now (quiet hours are the caller's to check)."""
    sanctum = find_sanctum(runtime.life.extensions)
    sanctum.open()
    limits = sanctum.config.limits
    being = runtime.being
    base = runtime.life
    before = _spent(being)
    capped: list[bool] = []

    def stop_requested() -> bool:
        if base.stop_requested():
            return True
        if not _round_boundary(being.state.conversation):
            return False  # the calls the model already asked for still run
        if add(sub(_spent(being), before), _worst_case(life)) > limits.max_cost:
            capped.append(True)
            return True
        return False

    life = dataclasses.replace(
        base,
        limits=dataclasses.replace(base.limits, max_tool_rounds=limits.max_rounds),
        stop_requested=stop_requested,
    )
    being.journal(
        events.pulse_started(being.now(), being.state.cycle + 1, limits.max_rounds, limits.max_cost)
    )
    sanctum.with_pulse(limits)
    status = "failed"
    report: CycleReport | None = None
    try:
        report = await runtime._live_one(life)
        status = report.status
        if capped and status == "cancelled" and not base.stop_requested():
            status = "cost_cap"
        elif status == "tool_round_limit":
            status = "round_cap"
    finally:
        sanctum.with_pulse(None)
        cost = sub(_spent(being), before)
        being.journal(events.pulse_finished(being.now(), being.state.cycle, status, cost))
        being.save()
    return PulseReport(status, being.state.cycle, render_money(cost), report=report)


async def live_pulses(
    runtime: Runtime,
    max_pulses: int | None = None,
    *,
    clock: Clock | None = None,
    wait: Callable[[float], Awaitable[None]] | None = None,
) -> None:
    """Pulse mode of `run`: a pulse whenever one is due and the hour is not quiet."""
    sanctum = find_sanctum(runtime.life.extensions)
    sanctum.open()
    now_of = clock or runtime.being.clock
    sleep = wait or runtime._sleep
    lived = 0
    while not runtime.stop_event.is_set() and (max_pulses is None or lived < max_pulses):
        runtime.settle_operator()
        if runtime.paused:
            await runtime._wait_for_operator(None)
            continue
        now = now_of()
        schedule = sanctum.schedule()
        start = schedule.next_start(sanctum.last_pulse, now)
        if start > now or schedule.quiet_at(now) is not None:
            await sleep(min(MAX_WAIT_SECS, max(1.0, (start - now).total_seconds())))
            continue
        result = await runtime.tolerating(lambda: live_pulse(runtime))
        if result is not None and (
            result.status == "budget_exhausted" or runtime.stop_event.is_set()
        ):
            break
        lived += 1


def next_pulse(sanctum: SanctumCore, now: datetime) -> str:
    """When the next pulse may start, rendered."""
    return render_timestamp(sanctum.schedule().next_start(sanctum.last_pulse, now))


def check_sanctum(settings: Settings, workspace_root: str) -> None:
    """Refuse bad Pulse options and a sanctum overlapping the workspace; touches nothing."""
    # Inside the workspace, the file tools would bypass the sanctum's naming rules.
    root = os.path.realpath(SanctumConfig.from_settings(settings).root)
    workspace = os.path.realpath(workspace_root)
    if os.path.commonpath([workspace, root]) in (workspace, root):
        raise ConfigurationError(
            f"sanctum and workspace must not contain each other: {root} / {workspace}"
        )
