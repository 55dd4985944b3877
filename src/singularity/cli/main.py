"""The `singularity` command: a thin layer over the library, with exit codes in one place."""

from __future__ import annotations

import contextlib
import os
import sys

import click

from singularity.cli.lazy import LazyCommand, LazyGroup
from singularity.cli.logs import configure_text_logs, report_error
from singularity.errors import SingularityError
from singularity.version import __version__

# Each command's module is imported when that command runs (`--help` imports none).
COMMANDS = {
    "brama": LazyCommand("singularity.cli.brama:brama", "The embedded model gateway."),
    "checkpoint": LazyCommand(
        "singularity.cli.checkpoint:checkpoint_command",
        "Replay a stopped being's state.redo into a complete state.json (for being-v1 readers).",
    ),
    "children": LazyCommand(
        "singularity.cli.children:children",
        "Show a being's children and theirs: status, balance, cycle, whether alive.",
    ),
    "console": LazyCommand(
        "singularity.cli.console:console_command",
        "Serve the operator console: the fleet, each being, chat and controls.",
    ),
    "doctor": LazyCommand(
        "singularity.cli.doctor:doctor_command",
        "Read-only pre-flight: configuration, gateway, model, Most and skills; every check runs.",
    ),
    "export": LazyCommand(
        "singularity.cli.exporting:export_command",
        "Copy a being, whole, to a place that holds none: state, journal, archive, sanctum.",
    ),
    "fleet": LazyCommand(
        "singularity.cli.fleet:fleet", "Start, steer and watch the beings of a fleet."
    ),
    "import": LazyCommand(
        "singularity.cli.mind_import:import_command",
        "Import memories, knowledge and profile facts into a being.",
    ),
    "journal": LazyCommand(
        "singularity.cli.journal:journal",
        "The private journal's metadata and maintenance (never its text).",
    ),
    "log": LazyCommand(
        "singularity.cli.talk:log_command",
        "Print a being's conversation and actions as a transcript, archived messages included.",
    ),
    "once": LazyCommand(
        "singularity.cli.live:once",
        "Boot, live one cycle, shut down, and print the cycle report.",
    ),
    "pulse": LazyCommand(
        "singularity.cli.pulse:pulse_command",
        "One pulse: a quiet cycle that tends memory, then does PULSE.md's tasks, under a cap.",
    ),
    "reasonlog": LazyCommand(
        "singularity.cli.journal:reasonlog_group", "The public reasonlog (`reasonlog.jsonl`)."
    ),
    "run": LazyCommand(
        "singularity.cli.live:run",
        "Boot and live cycles while solvent, until stopped (Ctrl-C or SIGTERM).",
    ),
    "sanctum": LazyCommand(
        "singularity.cli.sanctum:sanctum",
        "Look after a being's sanctum: its human-readable memory (docs/concepts.md).",
    ),
    "say": LazyCommand(
        "singularity.cli.talk:say",
        "Send a message to a being; it reads it at the start of its next cycle.",
    ),
    "show": LazyCommand(
        "singularity.cli.inspect:show",
        "Show a being: identity, status, budget, mind, newest memories, children.",
    ),
    "tools": LazyCommand(
        "singularity.cli.inspect:tools",
        "List every tool a being is offered: skills (servers are started), Most, built-ins, "
        "sanctum and journal.",
    ),
    "worker": LazyCommand(
        "singularity.cli.fleet:worker_command",
        "Run a fleet worker: beings' workflows and cycles, from the state store.",
    ),
    "verify": LazyCommand(
        "singularity.cli.inspect:verify",
        "Check every invariant of a being; list what is wrong and exit 4.",
    ),
}


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="singularity")
def cli() -> None:
    """Run and inspect persistent, self-modifying autonomous digital beings."""


def main() -> None:
    """Entry point: run the command, print errors as `singularity: <error>`, exit with its code."""
    configure_text_logs()
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        _say("singularity: aborted", 130)
        sys.exit(130)
    except click.ClickException as error:
        with contextlib.suppress(OSError):
            error.show()
        sys.exit(error.exit_code)
    except SingularityError as error:
        _say(f"singularity: {error}", error.exit_code)
        sys.exit(error.exit_code)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
    finally:
        _settle_streams()


def _say(text: str, exit_code: int) -> None:
    """The final error on stderr, if stderr can be written at all."""
    with contextlib.suppress(OSError):
        report_error(text, exit_code)


def _settle_streams() -> None:
    """Drop what a standard stream that cannot be written still holds (a full disk, a
    closed pipe), so the process exits with its command's code, not Python's 120."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
                stream.flush()
