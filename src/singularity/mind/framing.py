"""The messages that open each cycle (spec §7.2): the framing line and the one-time stimulus."""

from __future__ import annotations

from singularity.domain.state import AgentState
from singularity.money import render_money

FRAMING_ACTIONS = 10
STIMULUS_PREFIX = "External observation for this cycle: "


def framing_text(state: AgentState, cycle: int | None = None) -> str:
    """The framing message of a cycle (by default the state's current one)."""
    budget = state.budget
    actions = ", ".join(
        f"{action.tool}:{action.status}"
        for action in reversed(state.recent_actions[-FRAMING_ACTIONS:])
    )
    return (
        f"Begin autonomous cycle {state.cycle if cycle is None else cycle}. "
        f"Balance: {render_money(budget.remaining)} USD. "
        f"Earned: {render_money(budget.earned)} USD. "
        f"Net profit: {render_money(budget.net_profit)} USD. "
        f"Current model: {state.mind.current_model}. "
        f"Recent actions: {actions}. "
        "Inspect opportunities and choose the next useful action. "
        "A plain response ends only this cycle; the being continues living while solvent."
    )


def stimulus_text(stimulus: str) -> str:
    """The one-time external observation message."""
    return STIMULUS_PREFIX + stimulus
