"""A cycle's first request is built once: by the solvency check, which the first call then
sends (decision 16, issue 16), unless something it was built from changed in between.

Builds are counted as context selections (`select_context`, one per request built); the
requests are the bodies the scripted gateway received.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.runtime.loop import cycle
from singularity.runtime.loop.lifecycle import Runtime
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from tests.support.loop_http import bodies, boot, journal, run, state_of

ADD_RULE = "singularity_self_add_rule"
REMEMBER = "singularity_memory_remember"


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per request built (the real selection still runs)."""
    built: list[int] = []
    real: Callable[..., Any] = cycle.select_context

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cycle, "select_context", counting)
    return built


def live(
    root: Path,
    server: ScriptedServer,
    cycles: int,
    between: Callable[[Runtime], None] = lambda runtime: None,
    **extra: object,
) -> list[Any]:
    """Boot, live `cycles` cycles (calling `between` after each), shut down; the reports."""

    async def go() -> list[Any]:
        runtime = boot(root, server, **extra)
        try:
            reports = []
            for _ in range(cycles):
                reports.append(await runtime.once())
                between(runtime)
            return reports
        finally:
            await runtime.shutdown()

    return run(go())


def contents(body: dict[str, Any]) -> list[str]:
    return [message.get("content", "") for message in body["messages"][1:]]


def test_the_first_request_of_each_cycle_is_built_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = count_builds(monkeypatch)
    script = [
        Turn.tool_calls(Call(REMEMBER, '{"kind":"note","text":"one"}')),
        Turn.text("rested"),
        Turn.tool_calls(Call(ADD_RULE, '{"rule":"two"}')),
        Turn.text("rested again"),
    ]
    with ScriptedServer(script) as server:
        after: list[int] = []
        reports = live(tmp_path, server, 2, lambda _: after.append(len(built)))
        sent = bodies(server)
    assert [report.status for report in reports] == ["completed", "completed"]
    # The first cycle seeds the sanctum once it started: its section changed after the
    # check, so the first call built its own request.
    assert after[0] == 3
    # Two rounds: the check's build, which the first call sent, then the second round's.
    assert after[1] - after[0] == 2
    conversation = state_of(tmp_path).conversation
    # The second cycle's first call sent the whole conversation up to its framing (it
    # fits), as a build of its own would: the first cycle, then the framing.
    first_of_second = sent[2]
    framing_index = next(
        index
        for index, message in enumerate(conversation)
        if message["content"].startswith("Begin autonomous cycle 2.")
    )
    assert (
        contents(first_of_second)
        == [m.get("content", "") for m in conversation][: framing_index + 1]
    )
    assert first_of_second["messages"][0]["role"] == "system"


def test_a_first_request_that_does_not_fit_with_the_opening_is_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = "x" * 4000
    script = [
        Turn.tool_calls(Call(REMEMBER, json.dumps({"kind": "note", "text": long}))),
        Turn.text(long),
        Turn.text("short"),
    ]
    with ScriptedServer(script) as server:
        live(tmp_path, server, 1, context_tokens="1500")
        built = count_builds(monkeypatch)
        live(tmp_path, server, 1, context_tokens="1500", resume=True)
        [*_, last] = bodies(server)
    # The check's selection and the opening exceed the context: the first call selects
    # again, with the opening in the window.
    assert len(built) == 2
    assert contents(last)[-1].startswith("Begin autonomous cycle 2.")
    assert sum(len(m.get("content", "")) for m in last["messages"][1:]) < 2 * len(long)


# Output priced, prompt and instance time free: every call's worst case is 1 USD exactly.
PRICED = {"input_price": "0", "output_price": "1000", "max_tokens": "1000", "instance_price": "0"}
UNIT = Decimal("1e-20")


@pytest.mark.parametrize("under", [Decimal(0), UNIT])
def test_the_check_decides_at_the_first_calls_worst_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, under: Decimal
) -> None:
    built = count_builds(monkeypatch)
    marks: list[int] = []

    def broke(runtime: Runtime) -> None:
        runtime.being.state.budget.remaining = Decimal(1) - under
        marks.append(len(built))

    script = [Turn.text("first"), Turn.text("second")]
    with ScriptedServer(script) as server:
        reports = live(tmp_path, server, 2, broke, **PRICED)
        requests = len(server.completions)
    second = reports[1]
    reserved = [event for event in journal(tmp_path) if event["type"] == "cost_reserved"]
    if under:
        assert (second.status, second.cycle, requests) == ("budget_exhausted", 1, 1)
        assert len(reserved) == 1
    else:
        assert (second.cycle, requests) == (2, 2)
        assert Decimal(reserved[1]["api"]) + Decimal(reserved[1]["instance"]) == 1
        assert marks[1] - marks[0] == 1  # the check's request, sent by the first call
