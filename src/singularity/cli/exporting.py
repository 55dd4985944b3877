"""`singularity export`: copy a being, whole, to a new state directory or PostgreSQL store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from singularity.cli.options import AGENT_ID, settings_from, with_options
from singularity.cli.output import print_json
from singularity.config import (
    JOURNAL_OPTIONS,
    OPTIONS_BY_NAME,
    STATE_OPTIONS,
    STORE_OPTIONS,
    Settings,
)
from singularity.domain.state import AgentState
from singularity.sanctum.extension import SanctumConfig
from singularity.store.opening import StorePlace
from singularity.store.transfer import JournalReader, copy_being

if TYPE_CHECKING:
    from singularity.journal.portable import PortableJournal

EXPORT_OPTIONS = (
    STATE_OPTIONS + STORE_OPTIONS + AGENT_ID + (OPTIONS_BY_NAME["sanctum_dir"],) + JOURNAL_OPTIONS
)


@click.command(name="export")
@click.option(
    "--to",
    "to",
    required=True,
    help="Where the copy goes: a new state directory, or postgresql://… (no being there yet).",
)
@click.option(
    "--to-state-dir",
    "to_state_dir",
    default=None,
    help="With --to postgresql://…: the copy's new local state directory, where its private "
    "journal goes (needed when the being has one).",
)
@with_options(EXPORT_OPTIONS)
def export_command(to: str, to_state_dir: str | None, **params: Any) -> None:
    """Copy a being, whole, to a place that holds none: state, journal, archive, sanctum.

    From --state-dir (or --state-url and --agent-id) to --to. The being must not be
    running; it is left as it was, and only one of its two homes should live. Its private
    journal is read where its runtime keeps it (the journal options; a being in
    PostgreSQL keeps it in its local --state-dir).
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
    being = copy_being(
        source,
        target,
        agent_id,
        sanctum_root=sanctum_root,
        journal_of=_journal_reader(settings),
        local_dir=to_state_dir,
    )
    print_json(
        {
            "exported": source.label(being.state.identity.agent_id),
            "to": target.label(being.state.identity.agent_id),
            "cycle": being.state.cycle,
            "events": len(being.events),
            "archived": len(being.archived),
            "sanctum_files": sum(1 for entry in being.sanctum or [] if not entry.is_folder),
            "journal_entries": len(being.journal.rows) if being.journal is not None else None,
            **({"local_state_dir": to_state_dir} if to_state_dir is not None else {}),
        }
    )


def _journal_reader(settings: Settings) -> JournalReader:
    """Reads the private journal where the runtime with these settings keeps it."""

    def read(state: AgentState) -> PortableJournal | None:
        from singularity.journal.extension import fingerprint_of, journal_config
        from singularity.journal.portable import read_journal

        return read_journal(journal_config(settings, fingerprint_of(state)))

    return read
