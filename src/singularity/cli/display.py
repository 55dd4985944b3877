"""What a person (or a machine) sees of a living being on stderr.

The readable view follows the journal and the runtime's notices: each cycle, the model
call in flight with its elapsed time, the model that answered, what the being said, each
tool call with its outcome as the model read it, what was paid, warnings once.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, ClassVar

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.text import Text

from singularity.domain import events, notices
from singularity.domain.state import AgentState
from singularity.jsoncodec import compact, loads_strict
from singularity.money import render_money, sub
from singularity.storage.activity import Event

STATUS_STYLE = {"success": "green", "failed": "red", "indeterminate": "yellow"}
SAID_CHARS = 2000
RESULT_CHARS = 240


def json_lines() -> Callable[[Event], None]:
    """Each event and notice as one JSON line on stderr, for machines."""

    def emit(event: Event) -> None:
        sys.stderr.write(compact(event) + "\n")
        sys.stderr.flush()

    return emit


def shortened(text: str, limit: int) -> str:
    """The text on one line, cut to `limit` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def seen_by_model(status: str, bounded: events.OutputBounded | None) -> tuple[str, str]:
    """The status the model was shown for a call, and a note on what the boundary did.

    A result the output boundary withheld reached the model as a failure, whatever the
    call's own status (which the note gives).
    """
    if bounded is None:
        return status, ""
    if bounded.rejection is not None:
        return "failed", f" (result withheld: {bounded.rejection}; the call ended {status})"
    count = sum(bounded.redactions.values())
    return status, f" ({count} value{'s' if count != 1 else ''} redacted)"


def tool_summary(content: str) -> str:
    """What a tool message told the model: its error code and message, or its content."""
    try:
        document = loads_strict(content)
    except (ValueError, RecursionError):
        return shortened(content, RESULT_CHARS)
    if not isinstance(document, dict):
        return shortened(content, RESULT_CHARS)
    inner = document.get("content")
    text = inner if isinstance(inner, str) else "" if inner is None else compact(inner)
    if isinstance(inner, dict) and isinstance(inner.get("message"), str):
        text = inner["message"]
    code = document.get("error_code")
    parts = [part for part in (code if isinstance(code, str) else "", text) if part]
    return shortened(": ".join(parts), RESULT_CHARS)


class _Waiting:
    """A spinner with the seconds a model call has been running, redrawn by `Live`."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.started = time.monotonic()
        self.spinner = Spinner("dots", style="dim")

    def __rich__(self) -> RenderableType:
        seconds = time.monotonic() - self.started
        self.spinner.update(text=Text(f"waiting for {self.model}: {seconds:.0f} s", style="dim"))
        return Group(Text("  ", end=""), self.spinner)


class LiveView:
    """The readable running account of one being."""

    def __init__(self, state: AgentState, console: Console | None = None) -> None:
        self.state = state
        self.console = console or Console(stderr=True, highlight=False)
        self._live: Live | None = None
        self._bounded: dict[str, events.OutputBounded] = {}  # until its `tool_finished`

    def __call__(self, event: Event) -> None:
        kind = event.get("type")
        if kind != notices.MODEL_CALL_STARTED:
            self._stop_waiting()
        if kind in notices.NOTICE_TYPES:
            self._notices[str(kind)](self, event)
            return
        record = events.readable(event)
        handler = self._handlers.get(type(record)) if record is not None else None
        if handler is not None:
            handler(self, record)

    def _stop_waiting(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _print(self, text: str) -> None:
        self.console.print(text)

    def _started(self, event: events.Started) -> None:
        state = self.state
        self._print(
            f"[bold]{escape(state.identity.name)}[/bold] is alive: balance "
            f"{render_money(state.budget.remaining)} USD, model {escape(state.mind.current_model)}"
        )

    def _cycle(self, event: events.CycleStarted) -> None:
        self.console.rule(f"cycle {event.cycle}", style="dim")

    def _waiting(self, event: Event) -> None:
        if not self.console.is_terminal:
            return  # a spinner has nothing to show in a log file
        self._stop_waiting()
        self._live = Live(
            _Waiting(str(event["model"])),
            console=self.console,
            refresh_per_second=2,
            transient=True,
        )
        self._live.start()

    def _completed(self, event: events.ModelCompleted) -> None:
        usage = event.usage
        model = event.model or self.state.mind.current_model
        self._print(
            f"  [dim]model {escape(model)}: "
            f"{usage.prompt_tokens} + {usage.completion_tokens} tokens[/dim]"
        )

    def _said(self, event: Event) -> None:
        content = str(event.get("content", "")).strip()
        if content:
            name = escape(self.state.identity.name)
            self._print(f"  [bold]{name}:[/bold] {escape(shortened(content, SAID_CHARS))}")

    def _bounded_output(self, event: events.OutputBounded) -> None:
        self._bounded[event.tool] = event

    def _tool(self, event: events.ToolFinished) -> None:
        tool = event.tool
        status, note = seen_by_model(event.status, self._bounded.pop(tool, None))
        style = STATUS_STYLE.get(status, "white")
        self._print(f"  → {escape(tool)} [{style}]{escape(status)}[/{style}]{escape(note)}")

    def _tool_answer(self, event: Event) -> None:
        summary = tool_summary(str(event.get("content", "")))
        if summary:
            self._print(f"    [dim]{escape(summary)}[/dim]")

    def _paid(self, event: events.CostDebited) -> None:
        # The listener runs as the debit is journaled, just before it is applied.
        after = render_money(sub(self.state.budget.remaining, event.amount))
        self._print(f"  [dim]paid {render_money(event.amount)} USD; balance {after} USD[/dim]")

    def _earned(self, event: events.RevenueCredited) -> None:
        amount = render_money(event.amount)
        self._print(f"  [green]earned {amount} USD from {escape(event.source)}")

    def _warning(self, event: events.Warned) -> None:
        self._print(f"  [yellow]warning: {escape(event.message)}")

    def _stopped(self, event: events.Stopped) -> None:
        state = self.state
        self._print(
            f"[bold]{escape(state.identity.name)}[/bold] {event.status} after cycle "
            f"{event.cycle}; balance {render_money(state.budget.remaining)} USD"
        )

    _notices: ClassVar[dict[str, Callable[[LiveView, Event], None]]] = {
        notices.MODEL_CALL_STARTED: _waiting,
        notices.MODEL_ANSWERED: _said,
        notices.TOOL_ANSWERED: _tool_answer,
    }
    _handlers: ClassVar[dict[type[events.ActivityEvent], Callable[[LiveView, Any], None]]] = {
        events.Started: _started,
        events.CycleStarted: _cycle,
        events.ModelCompleted: _completed,
        events.OutputBounded: _bounded_output,
        events.ToolFinished: _tool,
        events.CostDebited: _paid,
        events.RevenueCredited: _earned,
        events.Warned: _warning,
        events.Stopped: _stopped,
    }


def live_display(state: AgentState) -> Callable[[Event], None]:
    """A readable running account: cycles, model calls, what was said, tools, balance."""
    return LiveView(state)
