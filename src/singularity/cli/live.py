"""Commands that animate a being: `once` and `run`."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

import click

from singularity.cli.display import json_lines, live_display
from singularity.cli.logs import use_json_logs
from singularity.cli.options import runtime_options, settings_from
from singularity.cli.output import print_json
from singularity.errors import SingularityError, StateError
from singularity.runtime.being import LiveBeing
from singularity.runtime.loop.hardening import make_non_dumpable as make_non_dumpable
from singularity.runtime.loop.lifecycle import Runtime
from singularity.runtime.mind_import.document import ImportDocument, parse_import, read_import_file
from singularity.storage.activity import Event

log = logging.getLogger(__name__)
LOG_FORMAT = click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="How the running being is shown on stderr: readable text or one JSON event a line.",
)
RESUME_WITH_IMPORT = (
    "import into an existing being with `singularity import` before starting it with --resume"
)


def _startup_import(path: str | None, resume: bool) -> ImportDocument | None:
    if path is None:
        return None
    if resume:
        raise StateError(RESUME_WITH_IMPORT)
    return parse_import(read_import_file(path))


def _install_signals(runtime: Runtime) -> None:
    loop = asyncio.get_running_loop()
    received: list[int] = []

    def on_signal(number: int) -> None:
        received.append(number)
        if len(received) == 1:
            log.info("stopping at the next safe point (send the signal again to stop now)")
            runtime.request_stop()
            return
        log.warning("stopping now")
        # Saved: the stop the user asked for succeeded (exit 0); unsaved: a state error.
        os._exit(0 if runtime.stop_now() else 4)

    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, on_signal, number)


async def _live(
    params: dict[str, Any],
    import_file: str | None,
    *,
    single: bool,
    max_cycles: int | None,
    log_format: str,
) -> None:
    if log_format == "json":
        use_json_logs()
    make_non_dumpable()
    settings = settings_from(params, on_postgres=True)
    document = _startup_import(import_file, settings.resume)
    watcher: Callable[[LiveBeing], Callable[[Event], None]] = (
        (lambda being: json_lines())
        if log_format == "json"
        else (lambda being: live_display(being.state))
    )
    runtime = Runtime.boot(settings, startup_import=document, watchers=[watcher])
    if runtime.startup_import is not None:
        print_json(runtime.startup_import.to_json())
    _install_signals(runtime)
    report = None
    try:
        if single:
            report = await runtime.once()
        else:
            await runtime.run(max_cycles)
    except SingularityError as error:
        scrubber = runtime.being.scrubber
        error.message = scrubber.text(error.message)  # decision 32: not even in the last words
        raise
    finally:
        await runtime.shutdown()
    if report is not None:
        print_json(report.to_json())


@click.command()
@runtime_options
@click.option("--import-file", default=None, help="Import a mind document into the new being.")
@LOG_FORMAT
def once(import_file: str | None, log_format: str, **params: Any) -> None:
    """Boot, live one cycle, shut down, and print the cycle report."""
    asyncio.run(_live(params, import_file, single=True, max_cycles=1, log_format=log_format))


@click.command()
@runtime_options
@click.option("--import-file", default=None, help="Import a mind document into the new being.")
@click.option(
    "--max-cycles", type=click.IntRange(min=1), default=None, help="Stop after this many cycles."
)
@LOG_FORMAT
def run(import_file: str | None, max_cycles: int | None, log_format: str, **params: Any) -> None:
    """Boot and live cycles while solvent, until stopped (Ctrl-C or SIGTERM)."""
    asyncio.run(
        _live(params, import_file, single=False, max_cycles=max_cycles, log_format=log_format)
    )
