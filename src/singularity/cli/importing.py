"""`singularity import`: merge a mind-import document into a being."""

from __future__ import annotations

import os
from typing import Any

import click

from singularity.cli.options import settings_from, state_options
from singularity.cli.output import print_json
from singularity.domain.mind_import import parse_import, read_import_file
from singularity.errors import StateError
from singularity.runtime.family import is_alive
from singularity.runtime.import_service import socket_path, submit
from singularity.runtime.importing import import_offline, refusal_message


@click.command(name="import")
@click.option("--file", "file", required=True, help="A singularity-mind-import-v1 JSON file.")
@state_options
def import_command(file: str, **params: Any) -> None:
    """Import memories, knowledge and profile facts into a being."""
    settings = settings_from(params)
    service = socket_path(settings.state_dir)
    # The lock, not the socket, says whether the being lives (decision 27): a socket left by
    # a killed runtime is removed by the offline import, under the lock.
    if os.path.lexists(service) and is_alive(settings.state_dir):
        document = read_import_file(file)
        parse_import(document)
        report = submit(service, document)
    else:
        report = import_offline(file, settings.state_dir).to_json()
    print_json(report)
    if not report["accepted"]:
        raise StateError(refusal_message(report["conflicting"], report["rejected"]))
