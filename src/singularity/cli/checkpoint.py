"""`singularity checkpoint`: write a stopped being's whole state to `state.json`."""

from __future__ import annotations

from typing import Any

import click

from singularity.cli.options import settings_from, store_options
from singularity.cli.output import print_json
from singularity.errors import ConfigurationError
from singularity.runtime.inspect.checkpointing import checkpoint_state_dir
from singularity.state_place import shown_url

IN_POSTGRES = (
    "a being in a PostgreSQL state store ({url}) has no state.json and no state.redo to "
    "checkpoint: each committed step updates its rows, which are its whole state; "
    "`singularity export --state-url … --agent-id A --to DIR` writes it out as a state "
    "directory whose state.json is complete"
)


@click.command(name="checkpoint")
@store_options
def checkpoint_command(**params: Any) -> None:
    """Replay a stopped being's state.redo into a complete state.json (for being-v1 readers)."""
    settings = settings_from(params, on_postgres=True)
    if settings.state_url is not None:
        raise ConfigurationError(IN_POSTGRES.format(url=shown_url(settings.state_url)))
    print_json(checkpoint_state_dir(settings.state_dir).to_json())
