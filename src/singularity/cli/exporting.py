"""`singularity export`: copy a being, whole, to a new state directory or PostgreSQL store."""

from __future__ import annotations

from typing import Any

import click

from singularity.cli.options import AGENT_ID, settings_from, with_options
from singularity.cli.output import print_json
from singularity.config import OPTIONS_BY_NAME, STATE_OPTIONS, STORE_OPTIONS
from singularity.sanctum.extension import SanctumConfig
from singularity.store.opening import StorePlace
from singularity.store.transfer import copy_being


@click.command(name="export")
@click.option(
    "--to",
    "to",
    required=True,
    help="Where the copy goes: a new state directory, or postgresql://… (no being there yet).",
)
@with_options(STATE_OPTIONS + STORE_OPTIONS + AGENT_ID + (OPTIONS_BY_NAME["sanctum_dir"],))
def export_command(to: str, **params: Any) -> None:
    """Copy a being, whole, to a place that holds none: state, journal, archive, sanctum.

    From --state-dir (or --state-url and --agent-id) to --to. The being must not be
    running; it is left as it was, and only one of its two homes should live.
    """
    given_agent = params.get("agent_id")
    settings = settings_from(params, on_postgres=True)
    source = StorePlace.chosen(settings.state_dir, settings.state_url)
    target = StorePlace.parse(to, "--to")
    agent_id = settings.agent_id if source.is_postgres else given_agent
    # A PostgreSQL being's sanctum is its rows, or the folder --sanctum-dir names: a being
    # that lived there keeps its sanctum in its local state directory.
    named = settings.sanctum_dir is not None or not source.is_postgres
    sanctum_root = SanctumConfig.from_settings(settings).root if named else None
    being = copy_being(source, target, agent_id, sanctum_root=sanctum_root)
    print_json(
        {
            "exported": source.label(being.state.identity.agent_id),
            "to": target.label(being.state.identity.agent_id),
            "cycle": being.state.cycle,
            "events": len(being.events),
            "archived": len(being.archived),
            "sanctum_files": sum(1 for entry in being.sanctum or [] if not entry.is_folder),
        }
    )
