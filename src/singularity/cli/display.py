"""What a person (or a machine) sees of a living being on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape

from singularity.domain.state import AgentState
from singularity.jsoncodec import compact
from singularity.money import parse_money, render_money, sub
from singularity.storage.activity import Event

STATUS_STYLE = {"success": "green", "failed": "red", "indeterminate": "yellow"}


def json_lines() -> Callable[[Event], None]:
    """Each event as one JSON line on stderr, for machines."""

    def emit(event: Event) -> None:
        sys.stderr.write(compact(event) + "\n")
        sys.stderr.flush()

    return emit


def live_display(state: AgentState) -> Callable[[Event], None]:
    """A readable running account: cycles, model calls, tools, balance."""
    console = Console(stderr=True, highlight=False)

    def show(event: Event) -> None:
        kind = event.get("type")
        budget = state.budget
        if kind == "started":
            console.print(
                f"[bold]{escape(state.identity.name)}[/bold] is alive: balance "
                f"{budget.remaining} USD, model {escape(state.mind.current_model)}"
            )
        elif kind == "cycle_started":
            console.rule(f"cycle {event['cycle']}", style="dim")
        elif kind == "model_completed":
            usage = event["usage"]
            console.print(
                f"  [dim]model {escape(state.mind.current_model)}: "
                f"{usage['prompt_tokens']} + {usage['completion_tokens']} tokens[/dim]"
            )
        elif kind == "tool_finished":
            style = STATUS_STYLE.get(str(event["status"]), "white")
            console.print(f"  → {escape(str(event['tool']))} [{style}]{event['status']}[/{style}]")
        elif kind == "cost_debited":
            # The listener runs as the debit is journaled, just before it is applied.
            after = render_money(sub(budget.remaining, parse_money(event["amount"])))
            console.print(f"  [dim]paid {event['amount']} USD; balance {after} USD[/dim]")
        elif kind == "revenue_credited":
            console.print(f"  [green]earned {event['amount']} USD from {escape(event['source'])}")
        elif kind == "warning":
            console.print(f"  [yellow]warning: {escape(str(event['message']))}")
        elif kind == "stopped":
            console.print(
                f"[bold]{escape(state.identity.name)}[/bold] {event['status']} after cycle "
                f"{event['cycle']}; balance {budget.remaining} USD"
            )

    return show
