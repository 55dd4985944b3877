"""Writing reports (stdout, JSON) and rich text for people."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from singularity.errors import FatalIoError
from singularity.jsoncodec import pretty
from singularity.secrets import os_error_text


def print_json(value: Any, *, sort_keys: bool = False) -> None:
    """Print a pretty JSON report to stdout; a stdout that cannot be written is an I/O error."""
    try:
        click.echo(pretty(value, sort_keys=sort_keys))
    except OSError as error:
        raise FatalIoError(f"cannot write the report to stdout: {os_error_text(error)}") from None


def console() -> Console:
    """A console on stdout that never interprets markup in data."""
    return Console(highlight=False, soft_wrap=True)
