"""The schedules the one loop is given: how each counts its steps and when it is over.

Contract: `Cycles(n)` is over after `n` cycles, a failed and tolerated one (`None`)
included, or at once after a cycle that found the being unable to pay or stopped;
`PulseSchedule(n)` likewise, ended early only by an exhausted budget; neither has a
limit without `n`; `Once` is over after its one step and is `single` (lived even when
paused, its failure raised). The loop itself is exercised by `run` and `run --pulse`
(`test_run.py`, `test_sanctum_pulse.py`).
"""

from __future__ import annotations

import pytest

from singularity.runtime.loop.schedule import Cycles, Once, PulseReport, PulseSchedule, schedule_for


def _lived(status: str) -> PulseReport:
    return PulseReport(status, 1, "0")


def test_cycles_are_over_at_their_limit_counting_failed_ones() -> None:
    cycles = Cycles(3)
    cycles.lived(_lived("completed"))
    cycles.lived(None)
    assert not cycles.over
    cycles.lived(_lived("tool_round_limit"))
    assert cycles.over and cycles.count == 3


@pytest.mark.parametrize("status", ["budget_exhausted", "cancelled"])
def test_a_cycle_that_cannot_pay_or_was_stopped_ends_the_cycles(status: str) -> None:
    cycles = Cycles()
    cycles.lived(_lived("completed"))
    assert not cycles.over
    cycles.lived(_lived(status))
    assert cycles.over


def test_pulses_end_at_their_limit_or_an_exhausted_budget() -> None:
    pulses = PulseSchedule(2)
    pulses.lived(_lived("cost_cap"))
    assert not pulses.over
    pulses.lived(None)
    assert pulses.over
    unlimited = PulseSchedule()
    for status in ("completed", "round_cap", "cancelled", "failed"):
        unlimited.lived(_lived(status))
    assert not unlimited.over
    unlimited.lived(_lived("budget_exhausted"))
    assert unlimited.over


def test_pulse_mode_picks_the_pulse_schedule() -> None:
    assert schedule_for(True, 4) == PulseSchedule(4)
    assert schedule_for(False) == Cycles()


def test_once_is_a_single_step_over_when_it_was_lived() -> None:
    once = Once()
    assert once.single and not once.over
    assert once.wait(None) == 0.0  # type: ignore[arg-type]
    once.lived(_lived("completed"))
    assert once.over and once.outcome == _lived("completed")
    assert not Cycles.single and not PulseSchedule.single
