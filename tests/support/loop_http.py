"""Helpers for driving a real being against the scripted gateway over real HTTP.

`boot` builds a `Runtime` the way the CLI does (settings resolved from flags only, no
environment), `cli` runs `main()` in-process with its exit code and streams, and the
readers return what a being left on disk: its state, its journal, its archive.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from singularity.cli import live
from singularity.cli.main import main
from singularity.config import Settings, resolve
from singularity.domain.records import ChatMessage
from singularity.domain.state import AgentState
from singularity.runtime.being import LiveBeing
from singularity.runtime.loop.lifecycle import Runtime
from singularity.storage.activity import Event
from singularity.store.directory import peek_state
from singularity.testing.scripted_server import RecordedRequest, ScriptedServer, _Handler
from singularity.tools.base import Toolset
from tests.support.commands import OPTION_PREFIXES

T = TypeVar("T")
# Variables a being's configuration reads (OpenAI's two are the gateway's last fallbacks).


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion (pytest-asyncio is not installed)."""
    return asyncio.run(coroutine)


def flags(root: Path, server: ScriptedServer, **extra: object) -> dict[str, object]:
    """Flags for a being in `root/being` with workspace `root/ws`, living on `server`."""
    workspace = root / "ws"
    workspace.mkdir(exist_ok=True)
    values: dict[str, object] = {
        "state_dir": str(root / "being"),
        "workspace": str(workspace),
        "brama_url": server.url,
        "cycle_interval_secs": "0",
        "brama_model": "scripted-model",
    }
    values.update({key: value for key, value in extra.items() if value is not None})
    return values


def settings(root: Path, server: ScriptedServer, **extra: object) -> Settings:
    """Settings resolved from `flags` alone."""
    return resolve(flags(root, server, **extra), environ={})


def boot(
    root: Path,
    server: ScriptedServer,
    *,
    extra_toolsets: Callable[[LiveBeing], list[Toolset]] | None = None,
    **extra: object,
) -> Runtime:
    """A booted runtime (call inside a running event loop)."""
    return Runtime.boot(settings(root, server, **extra), extra_toolsets=extra_toolsets)


def live_one_cycle(root: Path, server: ScriptedServer) -> None:
    """Boot the being in `root`, live one cycle on `server` and shut it down."""

    async def cycle() -> None:
        runtime = boot(root, server)
        try:
            await runtime.once()
        finally:
            await runtime.shutdown()

    run(cycle())


def state_of(root: Path) -> AgentState:
    """The being's current state: `state.json` with `state.redo` replayed onto it."""
    state = peek_state(str(root / "being"))
    if state is None:
        raise FileNotFoundError(f"no being at {root / 'being'}")
    return state


def all_events(root: Path) -> list[Event]:
    """Every journal event of the being, in order."""
    text = (root / "being" / "activity.jsonl").read_text("utf-8")
    return [json.loads(line) for line in text.splitlines()]


def journal(root: Path) -> list[Event]:
    """The loop's journal events (`LOOP_EVENTS`), in order."""
    return loop_events(all_events(root))


def journal_lines(root: Path) -> list[str]:
    """The journal's raw lines."""
    return (root / "being" / "activity.jsonl").read_text("utf-8").splitlines()


# The loop's own events (spec §5.5 and the ledger's); extensions journal others too.
LOOP_EVENTS = frozenset(
    {
        "started",
        "cycle_started",
        "model_completed",
        "cost_reserved",
        "cost_debited",
        "cost_released",
        "tool_finished",
        "revenue_credited",
        "mind_imported",
        "warning",
        "stopped",
    }
)


def types(events: Iterable[Event]) -> list[str]:
    """The types of the loop's events, in order (other extensions' events left out)."""
    return [str(event["type"]) for event in events if event["type"] in LOOP_EVENTS]


def loop_events(events: Iterable[Event]) -> list[Event]:
    """The loop's events, in order."""
    return [event for event in events if event["type"] in LOOP_EVENTS]


def archive(root: Path) -> list[dict[str, Any]]:
    """The archive lines of `conversation.jsonl` (`{"seq", "message"}`), in order."""
    path = root / "being" / "conversation.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def dangling_calls(conversation: Sequence[Mapping[str, Any]]) -> list[str]:
    """Tool-call ids of assistant messages that no later tool message answers."""
    answered = {m.get("tool_call_id") for m in conversation if m["role"] == "tool"}
    return [
        call["id"]
        for message in conversation
        if message["role"] == "assistant"
        for call in message.get("tool_calls", [])
        if call["id"] not in answered
    ]


def bodies(server: ScriptedServer) -> list[dict[str, Any]]:
    """The parsed bodies of every completion request the server received."""
    return [request.json for request in server.completions]


@dataclass(frozen=True)
class Result:
    """What one command run left: exit code, stdout, stderr."""

    code: int
    out: str
    err: str


def make_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Result]:
    """`main()` in this process, in `tmp_path`, with no option variables inherited.

    Keyword arguments of the returned function become environment variables.
    """
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(OPTION_PREFIXES):
            monkeypatch.delenv(name)
    # The hardening call would make the whole test process non-dumpable.
    monkeypatch.setattr(live, "make_non_dumpable", lambda: False)

    def invoke(*args: str, **env: str) -> Result:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["singularity", *args])
        code = 0
        try:
            main()
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        for name in env:
            monkeypatch.delenv(name)
        return Result(code, captured.out, captured.err)

    return invoke


def cli_args(root: Path, server: ScriptedServer | str, *extra: str) -> list[str]:
    """Common flags of `once`/`run` for a being in `root/being` on `server` (or a URL)."""
    (root / "ws").mkdir(exist_ok=True)
    return [
        "--state-dir",
        str(root / "being"),
        "--workspace",
        str(root / "ws"),
        "--brama-url",
        server if isinstance(server, str) else server.url,
        "--brama-model",
        "scripted-model",
        "--cycle-interval-secs",
        "0",
        *extra,
    ]


class ModelsOutageServer(ScriptedServer):
    """A scripted gateway whose model list can be made to fail with an HTTP status."""

    models_status: int | None = None

    def _route(self, handler: _Handler, request: RecordedRequest) -> None:
        status = self.models_status
        if status is not None and request.method == "GET" and request.path.endswith("v1/models"):
            body = json.dumps({"error": {"message": "model list unavailable"}}).encode()
            handler.reply(status, body)
            return
        super()._route(handler, request)


def conversation_of(state: AgentState) -> list[ChatMessage]:
    """The conversation window as plain dicts."""
    return [dict(message) for message in state.conversation]  # type: ignore[misc]
