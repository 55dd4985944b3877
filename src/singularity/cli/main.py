"""The `singularity` command: a thin layer over the library, with exit codes in one place."""

from __future__ import annotations

import logging
import sys

import click

from singularity import __version__
from singularity.cli.brama import brama
from singularity.cli.children import children
from singularity.cli.doctor import doctor_command
from singularity.cli.importing import import_command
from singularity.cli.inspect import show, tools, verify
from singularity.cli.journal import journal, reasonlog_group
from singularity.cli.live import once, run
from singularity.cli.sanctum import pulse_command, sanctum
from singularity.errors import SingularityError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="singularity")
def cli() -> None:
    """Run and inspect persistent, self-modifying autonomous digital beings."""


cli.add_command(run)
cli.add_command(once)
cli.add_command(show)
cli.add_command(verify)
cli.add_command(tools)
cli.add_command(import_command)
cli.add_command(doctor_command)
cli.add_command(brama)
cli.add_command(children)
cli.add_command(journal)
cli.add_command(reasonlog_group)
cli.add_command(sanctum)
cli.add_command(pulse_command)


def main() -> None:
    """Entry point: run the command, print errors as `singularity: <error>`, exit with its code."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # The MCP SDK logs every HTTP request and session event of a skill server at INFO.
    for name in ("httpx2", "mcp"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("singularity: aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except SingularityError as error:
        click.echo(f"singularity: {error}", err=True)
        sys.exit(error.exit_code)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
