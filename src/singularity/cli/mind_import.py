"""`singularity import`: merge a mind-import document into a being."""

from __future__ import annotations

from typing import Any

import click

from singularity.cli.options import settings_from, store_options
from singularity.cli.output import print_json
from singularity.errors import StateError
from singularity.runtime.being import place_of
from singularity.runtime.mind_import.apply import import_file, refusal_message


@click.command(name="import")
@click.option("--file", "file", required=True, help="A singularity-mind-import-v1 JSON file.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="A running being: give up after this many seconds waiting for it to apply the "
    "import [default: wait as long as it takes].",
)
@store_options
def import_command(file: str, timeout: float | None, **params: Any) -> None:
    """Import memories, knowledge and profile facts into a being.

    The being is in --state-dir, or with --state-url postgresql://… the one --agent-id
    names there; a running being is reached through its local state service and applies
    the import once its cycle in progress ends.
    """
    settings = settings_from(params, on_postgres=True)
    report = import_file(file, place_of(settings), settings.agent_id, timeout)
    print_json(report)
    if not report["accepted"]:
        raise StateError(refusal_message(report["conflicting"], report["rejected"]))
