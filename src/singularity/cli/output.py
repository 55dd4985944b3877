"""Writing reports (stdout, JSON) and rich text for people."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console

from singularity.jsoncodec import pretty


def print_json(value: Any, *, sort_keys: bool = False) -> None:
    """Print a pretty JSON report to stdout."""
    click.echo(pretty(value, sort_keys=sort_keys))


def console() -> Console:
    """A console on stdout that never interprets markup in data."""
    return Console(highlight=False, soft_wrap=True)
