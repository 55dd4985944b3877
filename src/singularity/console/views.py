"""What the console's pages show, built from a `BeingSource`: plain data for the templates."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from markdown_it import MarkdownIt

from singularity.console.follower import Follower, LedgerPoint
from singularity.console.source import BeingSource, depth_of
from singularity.domain.state import AgentState
from singularity.money import add, render_money
from singularity.runtime.talk.transcript import Entry, tail

TAIL_MESSAGES = 40
RECENT_SHOWN = 30
CHART_WIDTH = 640
CHART_HEIGHT = 160
CHART_POINTS = 400
MEMORIES_SHOWN = 50
_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")


@dataclass(frozen=True)
class FleetRow:
    """One being in the fleet table."""

    key: str
    depth: int
    name: str
    ticker: str
    status: str
    live: bool
    paused: bool
    cycle: int
    model: str
    balance: str
    earned: str
    spent: str
    children: int
    last_action: str
    waiting: int


def status_of(state: AgentState, live: bool, paused: bool) -> str:
    """The status an operator sees: the saved one, corrected by whether a runtime lives."""
    if live:
        return "paused" if paused else state.status
    if state.status in ("starting", "running", "stopping"):
        return "not running"
    return state.status


def spent_of(state: AgentState) -> Decimal:
    """What the being spent on tokens and instance time."""
    return add(state.budget.api_spent, state.budget.instance_spent)


def fleet_rows(source: BeingSource) -> list[FleetRow]:
    """Every being of the source, children after their parents."""
    keys = source.keys()
    rows = []
    for key in keys:
        try:
            state = source.state(key)
            follower = source.follower(key)
            live = source.alive(key)
            waiting = len(source.waiting(key))
        except Exception:  # a being that vanished or broke meanwhile is left out of this view
            continue
        action = state.recent_actions[-1] if state.recent_actions else None
        rows.append(
            FleetRow(
                key=key,
                depth=depth_of(source, key, keys),
                name=state.identity.name,
                ticker=state.identity.ticker,
                status=status_of(state, live, follower.paused),
                live=live,
                paused=follower.paused,
                cycle=state.cycle,
                model=state.mind.current_model,
                balance=render_money(state.budget.remaining),
                earned=render_money(state.budget.earned),
                spent=render_money(spent_of(state)),
                children=len(state.mind.children),
                last_action=f"{action.tool}: {action.status}" if action else "",
                waiting=waiting,
            )
        )
    return rows


def balance_series(starting: Decimal, ledger: list[LedgerPoint]) -> list[tuple[str, Decimal]]:
    """The balance after each ledger entry, from the starting balance."""
    balance = starting
    series = [("start", starting)]
    for point in ledger:
        balance = add(balance, point.delta)
        series.append((point.at, balance))
    return series


def chart(series: list[tuple[str, Decimal]]) -> dict[str, Any]:
    """An SVG polyline of the balance over ledger entries, scaled to the chart box."""
    if len(series) > CHART_POINTS:
        step = len(series) / CHART_POINTS
        series = [series[int(i * step)] for i in range(CHART_POINTS)] + [series[-1]]
    values = [float(value) for _, value in series]
    top, bottom = max(values), min(values)
    pad = (top - bottom) * 0.08 or max(abs(top) * 0.01, 1e-9)
    high, low = top + pad, bottom - pad
    span = high - low
    last = max(1, len(values) - 1)
    points = " ".join(
        f"{CHART_WIDTH * index / last:.1f},{CHART_HEIGHT - CHART_HEIGHT * (v - low) / span:.1f}"
        for index, v in enumerate(values)
    )
    return {
        "points": points,
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "top": render_money(max(value for _, value in series)),
        "bottom": render_money(min(value for _, value in series)),
        "entries": len(series) - 1,
        "first": series[0][0],
        "last": series[-1][0],
    }


def render_markdown(text: str) -> str:
    """Markdown as HTML; raw HTML in the text is shown as text, never rendered."""
    return str(_MARKDOWN.render(text))


def diff_lines(before: str, after: str, path: str) -> list[tuple[str, str]]:
    """A unified diff as (kind, line) pairs: `add`, `del`, `hunk`, `head` or `same`."""
    lines = []
    for line in difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"a/{path}", f"b/{path}", lineterm=""
    ):
        if line.startswith(("+++", "---")):
            kind = "head"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "same"
        lines.append((kind, line))
    return lines


def conversation_tail(source: BeingSource, key: str, follower: Follower) -> list[Entry]:
    """The newest messages of a being as transcript entries."""
    state = source.state(key)
    window = list(state.conversation)
    offset = state.mind.conversation_archived
    return tail(window, follower.rounds, TAIL_MESSAGES, offset)


def recent_events(follower: Follower) -> list[dict[str, Any]]:
    """The newest journal events, newest first, as short lines."""
    shown = []
    for event in reversed(list(follower.recent)[-RECENT_SHOWN:]):
        details = {
            name: value
            for name, value in event.items()
            if name not in ("type", "at", "text") and not isinstance(value, dict | list)
        }
        shown.append(
            {
                "type": event.get("type"),
                "at": event.get("at"),
                "details": ", ".join(f"{name} {value}" for name, value in details.items()),
            }
        )
    return shown


def memories(state: AgentState, query: str) -> list[dict[str, str]]:
    """The newest memories whose kind or text holds the query (case-insensitive)."""
    needle = query.strip().lower()
    found = []
    for memory in reversed(state.mind.memories):
        if needle and needle not in memory.kind.lower() and needle not in memory.text.lower():
            continue
        found.append({"kind": memory.kind, "text": memory.text, "at": memory.created_at})
        if len(found) == MEMORIES_SHOWN:
            break
    return found
