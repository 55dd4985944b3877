"""`singularity pulse`: one pulse now (`--once`, for a scheduler), or the schedule that
runs it (`--print-schedule`: a crontab line and a systemd timer)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import shlex
import signal
import sys
from datetime import timedelta
from typing import Any

import click

from singularity.cli import live
from singularity.cli.options import runtime_options, settings_from
from singularity.cli.output import print_json
from singularity.config import ALL_OPTIONS, Settings, resolve
from singularity.runtime.loop.lifecycle import Runtime
from singularity.runtime.loop.sanctum import pulse_due, pulse_schedule
from singularity.timestamps import system_clock

# Options a printed schedule sets itself, or that a scheduler must not repeat.
SCHEDULE_FIXED = frozenset({"state_dir", "resume", "pulse", "max_cycles", "stimulus"})
PATH_OPTIONS = frozenset({"workspace", "state_dir"})


def cron_step(frequency: timedelta) -> str:
    """The crontab schedule that fires often enough for the frequency.

    Cron cannot say "every 90 minutes": it fires at the largest step that divides the
    frequency (every 30 minutes for 90), and `pulse --once` lives a pulse only when one is
    due, so the pulses come at the frequency itself.
    """
    minutes = max(1, math.ceil(frequency.total_seconds() / 60))
    if minutes < 60 and 60 % minutes == 0:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    hours, left = divmod(minutes, 60)
    if not left and hours < 24 and 24 % hours == 0:
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    if minutes % (24 * 60) == 0:
        return "0 0 * * *"
    step = math.gcd(minutes, 60)
    return "0 * * * *" if step == 60 else ("* * * * *" if step == 1 else f"*/{step} * * * *")


def executable() -> list[str]:
    """This program by its full path: the `singularity` beside this Python, else `-m`."""
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "singularity")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return [beside]
    return [os.path.abspath(sys.executable), "-m", "singularity"]


def _is_path(name: str) -> bool:
    return name in PATH_OPTIONS or name.endswith(("_dir", "_file"))


def reproduced(settings: Settings) -> tuple[list[str], dict[str, str]]:
    """Flags (and variables, for a true default turned off) that give a scheduler's bare
    environment these settings; paths made absolute. Raw secrets are never copied."""
    flags: list[str] = []
    variables: dict[str, str] = {}
    defaults = resolve({}, config_file=os.devnull, environ={})
    rendered = settings.environment_values()
    for option in ALL_OPTIONS:
        value = getattr(settings, option.name)
        if option.name in SCHEDULE_FIXED or value is None:
            continue
        if value == getattr(defaults, option.name) and not _is_path(option.name):
            continue  # a relative default path is made absolute: cron runs in $HOME
        if option.kind == "bool":
            if value:
                flags.append(option.flag)
            elif option.env is not None:
                variables[option.env] = "false"
            continue
        text = rendered.get(option.env or "", str(value))
        if _is_path(option.name):
            text = os.path.abspath(text)
        flags += [option.flag, text]
    return flags, variables


def schedule_text(settings: Settings) -> str:
    """A crontab line and a systemd timer and service for the being's pulse."""
    frequency = pulse_schedule(settings).frequency
    flags, variables = reproduced(settings)
    command = shlex.join(
        [
            *executable(),
            "pulse",
            "--once",
            "--resume",
            "--state-dir",
            os.path.abspath(settings.state_dir),
            *flags,
        ]
    )
    prefix = " ".join(f"{name}={shlex.quote(value)}" for name, value in variables.items())
    cron = cron_step(frequency)
    lines = [
        f"# a pulse every {render_duration(frequency)} (PULSE.md over the configuration);",
        f"# cron fires at `{cron}` and `pulse --once` lives one only when it is due",
    ]
    if settings.raw_secrets:
        names = ", ".join(sorted(settings.raw_secrets))
        lines.append(f"# {names} are not copied here: give them to the scheduler as files")
    lines.append(f"{cron} {(prefix + ' ') if prefix else ''}{command}")
    environment = "".join(f"Environment={name}={value}\n" for name, value in variables.items())
    lines += [
        "",
        "[Timer]",
        "OnBootSec=5min",
        f"OnUnitActiveSec={int(frequency.total_seconds())}s",
        "",
        "[Service]",
        "Type=oneshot",
        f"{environment}ExecStart={command}",
    ]
    return "\n".join(lines)


def render_duration(frequency: timedelta) -> str:
    """`90m`, `6h`, `1d`, `45s`: the largest unit that divides it."""
    seconds = int(frequency.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@click.command("pulse")
@runtime_options
@click.option(
    "--once", is_flag=True, help="Live one pulse now if one is due (for cron or a timer)."
)
@click.option("--print-schedule", is_flag=True, help="Print a cron line and a systemd timer.")
def pulse_command(once: bool, print_schedule: bool, **params: Any) -> None:
    """One pulse: a quiet cycle that tends memory, then does PULSE.md's tasks, under a cap."""
    settings = dataclasses.replace(settings_from(params, on_postgres=True), pulse=True)
    if print_schedule:
        click.echo(schedule_text(settings))
        return
    if not once:
        raise click.UsageError("use --once (or `singularity run --pulse` for Pulse mode)")
    reason = pulse_due(settings, system_clock)
    if reason is not None:
        print_json({"pulse": "skipped", "reason": reason})
        return
    asyncio.run(_pulse_once(settings))


async def _pulse_once(settings: Settings) -> None:
    live.make_non_dumpable()  # as `run` and `once` do; looked up here so tests can stub it
    runtime = Runtime.boot(settings)
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, runtime.request_stop)
    try:
        report = await runtime.pulse_once()
    finally:
        await runtime.shutdown()
    print_json(report.to_json())
