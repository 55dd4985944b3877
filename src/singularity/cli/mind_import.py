"""`singularity import`: merge a mind-import document into a being."""

from __future__ import annotations

from typing import Any

import click

from singularity.cli.options import settings_from, state_options
from singularity.cli.output import print_json
from singularity.errors import StateError
from singularity.runtime.mind_import.apply import import_file, refusal_message


@click.command(name="import")
@click.option("--file", "file", required=True, help="A singularity-mind-import-v1 JSON file.")
@state_options
def import_command(file: str, **params: Any) -> None:
    """Import memories, knowledge and profile facts into a being."""
    report = import_file(file, settings_from(params).state_dir)
    print_json(report)
    if not report["accepted"]:
        raise StateError(refusal_message(report["conflicting"], report["rejected"]))
