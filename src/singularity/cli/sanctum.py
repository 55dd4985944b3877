"""`singularity sanctum init | wake | ls | grep | show | tend` and `singularity pulse`."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from datetime import timedelta
from typing import Any

import click

from singularity.cli import live
from singularity.cli.options import runtime_options, settings_from, with_options
from singularity.cli.output import print_json
from singularity.config import IDENTITY_OPTIONS, SANCTUM_OPTIONS, STATE_OPTIONS, Settings
from singularity.domain.identity import identity_from
from singularity.errors import StateError
from singularity.runtime.lifecycle import Runtime
from singularity.runtime.sanctum import live_pulse, quiet_window
from singularity.sanctum import tools, writing
from singularity.sanctum.extension import SanctumConfig, today
from singularity.sanctum.layout import Seed, initialize
from singularity.sanctum.names import SanctumRefusal
from singularity.sanctum.pulse import parse_frequency
from singularity.sanctum.store import SanctumStore, ensure_root
from singularity.sanctum.wake import wake
from singularity.storage.statedir import peek_state
from singularity.timestamps import system_clock

# Where the sanctum is; the Pulse options matter only to `init` and `pulse`.
sanctum_options = with_options(
    STATE_OPTIONS + tuple(option for option in SANCTUM_OPTIONS if option.name == "sanctum_dir")
)


@click.group()
def sanctum() -> None:
    """Look after a being's sanctum: its human-readable memory (docs/concepts.md)."""


def _root(settings: Settings) -> str:
    return SanctumConfig.from_settings(settings).root


def _open(settings: Settings) -> SanctumStore:
    root = _root(settings)
    if not os.path.isdir(root) or os.path.islink(root):
        raise StateError(f"no sanctum at {root} (run `singularity sanctum init`)")
    return SanctumStore(root)


def _context(store: SanctumStore, root: str) -> tools.Context:
    return tools.Context(
        store, lambda: today(system_clock), lambda bodies: wake(store, root, bodies=bodies)
    )


def _run(settings: Settings, tool: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run a sanctum tool for the operator; a refusal ends the command (exit 4)."""
    store = _open(settings)
    try:
        done = tool(_context(store, _root(settings)), arguments)
    finally:
        store.close()
    content: dict[str, Any] = done.outcome.content
    if done.outcome.error_code is not None:
        raise StateError(f"sanctum: {content['message']} ({done.outcome.error_code})")
    return content


@sanctum.command("init")
@with_options(IDENTITY_OPTIONS + STATE_OPTIONS + SANCTUM_OPTIONS)
def init_command(**params: Any) -> None:
    """Create the sanctum, or finish one cut off half-way; an existing file is never touched."""
    settings = settings_from(params)
    config = SanctumConfig.from_settings(settings)
    state = peek_state(settings.state_dir)
    identity = state.identity if state is not None else identity_from(settings)
    born = state.started_at[:10] if state is not None else today(system_clock)
    pulse = (config.frequency, config.quiet_hours) if config.pulse else None
    ensure_root(config.root)
    store = SanctumStore(config.root)
    try:
        store.remove_stale_temps()
        birth = initialize(store, Seed(identity, born, pulse))
    except SanctumRefusal as refusal:
        raise StateError(f"sanctum: {refusal.message}") from None
    finally:
        store.close()
    click.echo(birth.report(config.root))


@sanctum.command("wake")
@sanctum_options
@click.option("--pulse", "as_pulse", is_flag=True, help="Wake as for a pulse (MODE: PULSE).")
def wake_command(as_pulse: bool, **params: Any) -> None:
    """Print the wake text: identity files and the memory map, never a memory body."""
    settings = settings_from(params)
    root = _root(settings)
    store = SanctumStore(root) if os.path.isdir(root) and not os.path.islink(root) else None
    try:
        click.echo(wake(store, root, pulse=as_pulse).text)
    finally:
        if store is not None:
            store.close()


@sanctum.command("ls")
@click.argument("folder", required=False)
@sanctum_options
def ls_command(folder: str | None, **params: Any) -> None:
    """List a sanctum folder (default: the root) with file counts and sizes."""
    content = _run(settings_from(params), tools.list_tool, {"folder": folder})
    for entry in content["entries"]:
        if entry["type"] == "dir":
            click.echo(f"{entry['name']} ({entry['files']} files)")
        elif entry["type"] == "file":
            click.echo(f"{entry['name']} ({entry['bytes']} bytes)")
        else:
            click.echo(f"{entry['name']} (not a regular file)")
    if content["truncated"]:
        click.echo(f"… {content['total'] - len(content['entries'])} more")


@sanctum.command("grep")
@click.argument("text")
@click.option("--folder", default=None, help="Folder to search [default: memory].")
@sanctum_options
def grep_command(text: str, folder: str | None, **params: Any) -> None:
    """Find TEXT (case-insensitive) in sanctum files, newest dated files first."""
    content = _run(settings_from(params), tools.grep_tool, {"query": text, "folder": folder})
    for hit in content["hits"]:
        click.echo(hit)
    if content["truncated"]:
        click.echo("… more hits not shown")


@sanctum.command("show")
@click.argument("path")
@sanctum_options
def show_command(path: str, **params: Any) -> None:
    """Print one sanctum file."""
    settings = settings_from(params)
    store = _open(settings)
    try:
        click.echo(store.read_text(tools.path_argument({"path": path})[1]).rstrip("\n"))
    except SanctumRefusal as refusal:
        raise StateError(f"sanctum: {refusal.message} ({refusal.code})") from None
    finally:
        store.close()


@sanctum.command("tend")
@click.option("--stamp", is_flag=True, help="Stamp memory/.tended with today's date.")
@sanctum_options
def tend_command(stamp: bool, **params: Any) -> None:
    """Show what tending needs; with --stamp, record a tending pass done by hand."""
    settings = settings_from(params)
    if stamp:
        print_json(_run(settings, writing.tended_tool, {}))
        return
    store = _open(settings)
    try:
        woken = wake(store, _root(settings))
    finally:
        store.close()
    if woken.memory is None:
        raise StateError(woken.text.splitlines()[1])
    memory = woken.memory
    click.echo(memory.tending_line())
    click.echo(f"undistilled raw files: {len(memory.undistilled)}")
    click.echo("tending due" if memory.tending_due else "nothing to tend")


def cron_line(frequency: timedelta, command: str) -> str:
    """A crontab line for the frequency (rounded to whole minutes, hours or days)."""
    minutes = max(1, int(frequency.total_seconds()) // 60)
    if minutes < 60:
        return f"*/{minutes} * * * * {command}"
    if minutes < 24 * 60:
        return f"0 */{minutes // 60} * * * {command}"
    return f"0 0 */{minutes // (24 * 60)} * * {command}"


@click.command("pulse")
@runtime_options
@click.option("--once", is_flag=True, help="Live one pulse now (for cron or a systemd timer).")
@click.option("--print-schedule", is_flag=True, help="Print a cron line and a systemd timer.")
def pulse_command(once: bool, print_schedule: bool, **params: Any) -> None:
    """One pulse: a quiet cycle that tends memory, then does PULSE.md's tasks, under a cap."""
    settings = dataclasses.replace(settings_from(params), pulse=True)
    if print_schedule:
        frequency = parse_frequency(settings.pulse_frequency)
        command = (
            f"singularity pulse --once --resume --state-dir {os.path.abspath(settings.state_dir)}"
        )
        click.echo(cron_line(frequency, command))
        click.echo(
            f"\n[Timer]\nOnBootSec=5min\nOnUnitActiveSec={int(frequency.total_seconds())}s\n"
            f"\n[Service]\nType=oneshot\nExecStart={command}"
        )
        return
    if not once:
        raise click.UsageError("use --once (or `singularity run --pulse` for Pulse mode)")
    window = quiet_window(settings, system_clock)
    if window is not None:
        print_json({"pulse": "skipped", "reason": f"quiet hours {window.render()}"})
        return
    asyncio.run(_pulse_once(settings))


async def _pulse_once(settings: Settings) -> None:
    live.make_non_dumpable()  # as `run` and `once` do; looked up here so tests can stub it
    runtime = Runtime.boot(settings)
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, runtime.request_stop)
    try:
        report = await live_pulse(runtime)
    finally:
        await runtime.shutdown()
    print_json(report.to_json())
