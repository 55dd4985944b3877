"""The live view of a running being (`singularity run` on a terminal).

A real cycle over HTTP against the scripted gateway, watched by the view writing to a
console in memory: it shows the model that answered (not the selector), what the being
said, each tool call with what the model was told, what was paid, each warning once, and
on a terminal the seconds a model call has been running.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from rich.console import Console

from singularity.cli.display import LiveView, tool_summary
from singularity.runtime.loop.lifecycle import Runtime
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from tests.support.loop_http import settings

REMEMBER = "singularity_memory_remember"


def _watch(root: Path, turns: list[Turn], *, terminal: bool) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=120, color_system=None)

    async def live() -> None:
        async with ScriptedServer(turns) as server:
            runtime = Runtime.boot(
                settings(root, server, brama_model="any", input_price="2"),
                watchers=[lambda being: LiveView(being.state, console)],
            )
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()

    asyncio.run(live())
    return out.getvalue()


def test_the_view_tells_what_happened_as_the_model_saw_it(tmp_path: Path) -> None:
    turns = [
        Turn.tool_calls(
            Call(REMEMBER, '{"kind":"plan","text":"read the notes"}'),
            Call(REMEMBER, '{"kind":"plan"}'),
            content="First I note my plan.",
            model="gpt-4o-mini-2024-07-18",
        ),
        Turn.text("Nothing more today.", finish_reason="length", model="gpt-4o-mini-2024-07-18"),
    ]
    lines = _watch(tmp_path, turns, terminal=False).splitlines()
    assert lines[0] == "MyAgent is alive: balance 10 USD, model any"
    models = [line.strip() for line in lines if line.strip().startswith("model ")]
    assert len(models) == 2
    assert all(line.startswith("model gpt-4o-mini-2024-07-18: ") for line in models)
    assert "  MyAgent: First I note my plan." in lines
    assert "  MyAgent: Nothing more today." in lines
    tools = [line for line in lines if line.startswith("  → ")]
    assert tools == [f"  → {REMEMBER} success", f"  → {REMEMBER} failed"]
    answer = lines[lines.index(f"  → {REMEMBER} failed") + 1]
    assert answer.startswith("    invalid_arguments: ") and "text" in answer  # as told
    warnings = [line for line in lines if "warning:" in line]
    assert warnings == [
        "  warning: truncated: the answer reached max_tokens (2048); its text is kept"
    ]
    assert sum(line.strip().startswith("paid ") for line in lines) == 2
    assert lines[-1].startswith("MyAgent stopped after cycle 1; balance ")
    assert not any("waiting for" in line for line in lines)  # no spinner in a log file


def test_a_terminal_sees_the_seconds_a_model_call_has_been_running(tmp_path: Path) -> None:
    shown = _watch(tmp_path, [Turn.text("Thinking done.").delayed(0.5)], terminal=True)
    assert "waiting for any: " in shown
    assert "MyAgent: Thinking done." in shown


def test_tool_summary_shows_the_error_code_and_message() -> None:
    failed = (
        '{"chat_id":null,"content":{"message":"no such file: notes.txt"},'
        '"error_code":"not_found","message_id":null,"status":"failed"}'
    )
    assert tool_summary(failed) == "not_found: no such file: notes.txt"
    assert tool_summary('{"content":{"bytes":2},"status":"success"}') == '{"bytes":2}'
    assert tool_summary('{"content":null,"error_code":"rejected"}') == "rejected"
    assert tool_summary("plain text " * 40).endswith("…")
