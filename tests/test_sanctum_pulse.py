"""Pulse: the schedule in PULSE.md, quiet hours the runtime enforces, and per-pulse caps."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from singularity.cli.pulse import cron_step
from singularity.config import resolve
from singularity.runtime.loop.lifecycle import Runtime
from singularity.runtime.loop.sanctum import quiet_window
from singularity.runtime.loop.schedule import PulseSchedule, live_pulse
from singularity.sanctum.pulse import (
    Schedule,
    parse_frequency,
    parse_quiet_hours,
    schedule_from,
)
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from tests.support.loop_http import Result, all_events, cli_args, run, settings

RUNAWAY = Turn.tool_calls(
    Call("singularity_sanctum_list", "{}"),
    usage={"prompt_tokens": 10, "completion_tokens": 500, "total_tokens": 510},
)


def at(hour: int, minute: int = 0, day: int = 7) -> datetime:
    return datetime(2026, 10, day, hour, minute, tzinfo=UTC)


def test_frequencies() -> None:
    assert parse_frequency("90s") == timedelta(seconds=90)
    assert parse_frequency("every 6h") == timedelta(hours=6)
    assert parse_frequency(" 2D ") == timedelta(days=2)
    for bad in ("", "0h", "6", "h", "6 hours", "-1h"):
        with pytest.raises(ValueError):
            parse_frequency(bad)


def test_quiet_hours_across_midnight_and_in_another_zone() -> None:
    (night,) = parse_quiet_hours("22:00-07:00 UTC")
    assert night.contains(at(23)) and night.contains(at(6, 59)) and not night.contains(at(7))
    assert night.ends_after(at(23)) == at(7, day=8)
    (local,) = parse_quiet_hours("22:00-07:00 +02:00")
    assert local.contains(at(20)) and not local.contains(at(5))
    lunch, late = parse_quiet_hours("12:00-13:00, 23:30-23:45")
    assert lunch.contains(at(12, 30)) and late.contains(at(23, 40)) and not late.contains(at(23))
    (whole,) = parse_quiet_hours("00:00-24:00")
    assert whole.contains(at(13))
    assert parse_quiet_hours("none") == ()
    for bad in ("22-07", "25:00-07:00", "22:00-07:00 CET", "22:00-07:60", "x"):
        with pytest.raises(ValueError):
            parse_quiet_hours(bad)


def test_pulse_md_sets_the_schedule_and_cannot_lift_configured_quiet_hours() -> None:
    configured = parse_quiet_hours("01:00-02:00")
    text = "# Pulse\n\n- **Frequency:** 2h\n- Quiet hours: 22:00-07:00 UTC\n- Frequency: soon\n"
    schedule = schedule_from(text, timedelta(hours=6), configured)
    assert schedule.frequency == timedelta(hours=2)
    assert len(schedule.quiet) == 2
    lifted = schedule_from(
        "- Quiet hours: none\n- Quiet hours: whenever\n", timedelta(hours=6), configured
    )
    assert lifted == Schedule(timedelta(hours=6), configured)


def test_the_next_pulse_waits_for_its_time_and_for_quiet_hours_to_end() -> None:
    schedule = Schedule(timedelta(hours=6), parse_quiet_hours("22:00-07:00"))
    assert schedule.next_start(None, at(12)) == at(12)
    assert schedule.next_start(at(12), at(13)) == at(18)
    assert schedule.next_start(at(18), at(18, 30)) == at(7, day=8)
    assert schedule.next_start(None, at(3)) == at(7)


def _clocked(
    tmp_path: Path, server: ScriptedServer, start: datetime, **extra: str
) -> tuple[Runtime, list[datetime]]:
    now = [start]
    runtime = Runtime.boot(settings(tmp_path, server, **extra), clock=lambda: now[0])
    return runtime, now


def test_quiet_hours_are_respected_under_an_injected_clock(tmp_path: Path) -> None:
    waits: list[float] = []

    async def live() -> None:
        async with ScriptedServer() as server:
            runtime, now = _clocked(
                tmp_path, server, at(23), pulse="true", pulse_quiet_hours="22:00-07:00 UTC"
            )

            async def wait(seconds: float) -> None:
                waits.append(seconds)
                now[0] += timedelta(seconds=seconds)

            try:
                await runtime.live(PulseSchedule(3), sleep=wait)
            finally:
                await runtime.shutdown()

    run(live())
    events = all_events(tmp_path)
    started = [event["at"] for event in events if event["type"] == "pulse_started"]
    assert started == ["2026-10-08T07:00:00Z", "2026-10-08T13:00:00Z", "2026-10-08T19:00:00Z"]
    finished = [event["status"] for event in events if event["type"] == "pulse_finished"]
    assert finished == ["completed"] * 3
    assert sum(waits) == 20 * 3600
    assert max(waits) <= 60


def test_quiet_window_reads_pulse_md_without_touching_the_being(tmp_path: Path) -> None:
    flags = {"state_dir": str(tmp_path / "being"), "pulse_quiet_hours": "01:00-02:00"}
    config = resolve(flags, environ={})
    assert quiet_window(config, lambda: at(1, 30)) is not None
    assert quiet_window(config, lambda: at(12)) is None
    assert not (tmp_path / "being").exists()
    sanctum = tmp_path / "being" / "sanctum"
    sanctum.mkdir(parents=True)
    (sanctum / "PULSE.md").write_text("- Quiet hours: 11:00-13:00 UTC\n")
    assert quiet_window(config, lambda: at(12)) is not None


def _pulse_events(tmp_path: Path) -> list[dict[str, object]]:
    return [e for e in all_events(tmp_path) if str(e["type"]).startswith("pulse_")]


def test_the_round_cap_stops_a_runaway_pulse(tmp_path: Path) -> None:
    async def live() -> None:
        async with ScriptedServer(default=RUNAWAY) as server:
            runtime = Runtime.boot(settings(tmp_path, server, pulse_max_rounds="3"))
            try:
                result = await live_pulse(runtime)
            finally:
                await runtime.shutdown()
            assert (result.status, len(server.completions)) == ("round_cap", 3)
            system = server.completions[0].json["messages"][0]["content"]
            assert "\nMODE: PULSE\n" in system
            assert "at most 3 model rounds and 0.1 USD." in system

    run(live())
    assert [e["type"] for e in _pulse_events(tmp_path)] == ["pulse_started", "pulse_finished"]
    assert _pulse_events(tmp_path)[1]["status"] == "round_cap"


def test_the_cost_cap_stops_a_runaway_pulse_before_it_can_pass_the_cap(tmp_path: Path) -> None:
    async def live() -> None:
        async with ScriptedServer(default=RUNAWAY) as server:
            runtime = Runtime.boot(
                settings(
                    tmp_path,
                    server,
                    output_price="100",
                    max_tokens="1000",
                    pulse_max_cost="0.22",
                )
            )
            try:
                result = await live_pulse(runtime)
            finally:
                await runtime.shutdown()
            # Each call costs 0.05 and may cost 0.1: the fourth would risk passing 0.22.
            assert (result.status, result.cost_usd, len(server.completions)) == (
                "cost_cap",
                "0.15",
                3,
            )
            assert runtime.being.state.status == "stopped"

    run(live())
    assert _pulse_events(tmp_path)[1]["cost"] == "0.15"


def test_pulse_once_skips_quiet_hours_without_touching_anything(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer() as server:
        result = cli(
            "pulse", "--once", *cli_args(tmp_path, server, "--pulse-quiet-hours", "00:00-24:00")
        )
        assert server.completions == []
    assert result.code == 0, result.err
    assert json.loads(result.out) == {
        "pulse": "skipped",
        "reason": "quiet hours 00:00-00:00 UTC+00:00",
    }
    assert not (tmp_path / "being").exists()


def test_pulse_once_lives_one_pulse_and_seeds_pulse_md(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.text("tended and done")]) as server:
        result = cli("pulse", "--once", *cli_args(tmp_path, server))
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert (report["pulse"], report["cycle"], report["report"]["final_content"]) == (
        "completed",
        1,
        "tended and done",
    )
    assert "- Frequency: 6h" in (tmp_path / "being" / "sanctum" / "PULSE.md").read_text()
    kinds = [e["type"] for e in all_events(tmp_path)]
    assert (
        kinds.index("pulse_started") < kinds.index("cycle_started") < kinds.index("pulse_finished")
    )


def test_run_in_pulse_mode_lives_pulses(tmp_path: Path, cli: Callable[..., Result]) -> None:
    with ScriptedServer() as server:
        args = cli_args(tmp_path, server, "--pulse", "--pulse-frequency", "1s", "--max-cycles", "2")
        result = cli("run", *args)
        systems = [c.json["messages"][0]["content"] for c in server.completions]
    assert result.code == 0, result.err
    assert [e["type"] for e in _pulse_events(tmp_path)] == ["pulse_started", "pulse_finished"] * 2
    assert len(systems) == 2 and all("\nMODE: PULSE\n" in system for system in systems)
    started = [datetime.fromisoformat(str(e["at"])) for e in _pulse_events(tmp_path)[::2]]
    assert started[1] - started[0] >= timedelta(seconds=1)


def test_print_schedule(tmp_path: Path, cli: Callable[..., Result]) -> None:
    result = cli("pulse", "--print-schedule", "--state-dir", "b", "--pulse-frequency", "30m")
    singularity = str(Path(sys.executable).with_name("singularity"))
    assert result.out.splitlines()[2] == (
        f"*/30 * * * * {singularity} pulse --once --resume --state-dir {tmp_path}/b "
        f"--workspace {tmp_path}/workspace --pulse-frequency 30m"
    )
    assert "OnUnitActiveSec=1800s" in result.out


@pytest.mark.parametrize(
    ("frequency", "step"),
    [
        ("1m", "* * * * *"),
        ("15m", "*/15 * * * *"),
        ("45m", "*/15 * * * *"),
        ("90m", "*/30 * * * *"),
        ("1h", "0 * * * *"),
        ("6h", "0 */6 * * *"),
        ("5h", "0 * * * *"),
        ("1d", "0 0 * * *"),
        ("2d", "0 0 * * *"),
    ],
)
def test_cron_fires_often_enough_for_any_frequency(frequency: str, step: str) -> None:
    assert cron_step(parse_frequency(frequency)) == step


def test_the_printed_schedule_runs_from_a_bare_environment_and_pulses_only_when_due(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.text("first pulse")]) as server:
        first = cli("pulse", "--once", *cli_args(tmp_path, server, "--pulse-frequency", "6h"))
        assert first.code == 0, first.err
        pulse_md = tmp_path / "being" / "sanctum" / "PULSE.md"
        pulse_md.write_text(pulse_md.read_text().replace("- Frequency: 6h", "- Frequency: 90m"))
        printed = cli(
            "pulse", "--print-schedule", *cli_args(tmp_path, server, "--pulse-frequency", "6h")
        )
        lines = printed.out.splitlines()
        assert lines[0].startswith("# a pulse every 90m (PULSE.md")
        cron = next(line for line in lines if line.startswith("*/30 * * * * "))
        assert f"--brama-url {server.url}" in cron and "--brama-model scripted-model" in cron
        command = cron.removeprefix("*/30 * * * * ")
        exec_line = next(line for line in lines if line.startswith("ExecStart="))
        assert exec_line == f"ExecStart={command}"
        # As cron runs it: no environment at all, from the root directory.
        bare = subprocess.run(
            ["env", "-i", "/bin/sh", "-c", command],
            cwd="/",
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert bare.returncode == 0, bare.stderr
        assert json.loads(bare.stdout)["pulse"] == "skipped"
        assert json.loads(bare.stdout)["reason"].startswith("not due until ")
        assert len(server.completions) == 1  # nothing was asked of the model
        # Once the last pulse is 90 minutes old, the same command lives one.
        events = tmp_path / "being" / "activity.jsonl"
        lines = events.read_text().splitlines()
        earlier = (datetime.now(UTC) - timedelta(minutes=91)).strftime("%Y-%m-%dT%H:%M:%SZ")
        rewritten = []
        for line in lines:
            event = json.loads(line)
            if event["type"] == "pulse_finished":
                event["at"] = earlier
                line = json.dumps(event)
            rewritten.append(line)
        events.write_text("\n".join(rewritten) + "\n")
        due = subprocess.run(
            ["env", "-i", "/bin/sh", "-c", command],
            cwd="/",
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert due.returncode == 0, due.stderr
    assert json.loads(due.stdout)["pulse"] == "completed"
