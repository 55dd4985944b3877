"""`singularity checkpoint`: write a stopped being's whole state to `state.json`."""

from __future__ import annotations

from typing import Any

import click

from singularity.cli.options import settings_from, state_options
from singularity.cli.output import print_json
from singularity.runtime.inspect.checkpointing import checkpoint_state_dir


@click.command(name="checkpoint")
@state_options
def checkpoint_command(**params: Any) -> None:
    """Replay a stopped being's state.redo into a complete state.json (for being-v1 readers)."""
    settings = settings_from(params)
    print_json(checkpoint_state_dir(settings.state_dir).to_json())
