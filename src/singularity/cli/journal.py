"""`singularity journal …` and `singularity reasonlog …`: metadata and public text only.

No journal command ever prints journal text: `stats` gives counts and ages, `verify`
names failing rows by id. The being is the one `--state-dir` holds, or with `--state-url
postgresql://…` the one `--agent-id` names there; its journal is where the runtime keeps
it (`--journal-url`, by default in its state directory), and its public reasonlog is in
that local state directory. Commands that change the journal take the being's hold (the
state directory's lock, and a PostgreSQL being's lease too), so they never race a living
being; `stats`, `verify` and the reasonlog only read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from singularity.cli.options import AGENT_ID, settings_from, store_options, with_options
from singularity.cli.output import print_json
from singularity.config import JOURNAL_OPTIONS, STATE_OPTIONS, STORE_OPTIONS, Settings
from singularity.errors import StateError
from singularity.journal import reasonlog
from singularity.journal.extension import fingerprint_of, journal_config
from singularity.journal.opening import KeyLost, open_journal, remove_files
from singularity.journal.service import Damaged, Journal, JournalConfig
from singularity.jsoncodec import compact
from singularity.runtime.being import place_of
from singularity.storage.statedir import StateDir
from singularity.store.opening import holds_being_at, open_store_at, peek_state_at

journal_options = with_options(STATE_OPTIONS + STORE_OPTIONS + AGENT_ID + JOURNAL_OPTIONS)


def _config(settings: Settings) -> JournalConfig:
    place = place_of(settings)
    state = peek_state_at(place, settings.agent_id)
    if state is None:
        where = place.label(settings.agent_id) if place.is_postgres else settings.state_dir
        raise StateError(f"no being at {where}")
    return journal_config(settings, fingerprint_of(state))


@contextlib.contextmanager
def _held(settings: Settings) -> Iterator[None]:
    """The being's hold, as a runtime takes it: its state directory's lock and, for a being
    in PostgreSQL, its lease (`state: another runtime owns …` while it lives)."""
    with StateDir.open(settings.state_dir, create=False):
        place = place_of(settings)
        if not place.is_postgres:
            yield
            return
        store = open_store_at(place, settings.agent_id, create=False)
        try:
            yield
        finally:
            store.close()


@contextlib.contextmanager
def _opened(params: dict[str, Any], *, lock: bool) -> Iterator[Journal]:
    settings = settings_from(params, on_postgres=True)
    config = _config(settings)
    with contextlib.ExitStack() as stack:
        if lock:
            stack.enter_context(_held(settings))
        journal = open_journal(config, create=False, recover=False)
        if journal is None:
            raise StateError(f"no journal exists for the being at {config.state_dir}")
        stack.callback(journal.close)
        yield journal


@click.group()
def journal() -> None:
    """The private journal's metadata and maintenance (never its text)."""


@journal.command()
@journal_options
def stats(**params: Any) -> None:
    """Counts by day, mood, promotion and redaction; oldest age; embedder and keys."""
    with _opened(params, lock=False) as opened:
        print_json(opened.stats())


@journal.command()
@journal_options
@click.option("--dry-run", is_flag=True, help="Only count what would be purged.")
def purge(dry_run: bool, **params: Any) -> None:
    """Delete entries older than the retention window and reclaim their space."""
    with _opened(params, lock=not dry_run) as opened:
        if dry_run:
            print_json({"would_purge": opened.expired()})
        else:
            print_json({"purged": opened.purge()})


@journal.command()
@journal_options
def embed(**params: Any) -> None:
    """Embed entries that lack a vector of the current embedder (after a model change)."""
    with _opened(params, lock=True) as opened:
        done, failed = opened.embed_pending()
        print_json({"embedder": opened.embedder.name, "embedded": done, "unreadable": failed})


@journal.command("rotate-key")
@journal_options
def rotate_key(**params: Any) -> None:
    """Re-encrypt every entry under a new key, then destroy keys no entry needs."""
    with _opened(params, lock=True) as opened:
        key_id, moved, failed = opened.rotate_key()
        print_json({"key_id": key_id, "re_encrypted": moved, "unreadable": failed})


@journal.command("verify")
@journal_options
def verify_journal(**params: Any) -> None:
    """Decrypt and authenticate every entry in memory; name what is unreadable (exit 4)."""
    with _opened(params, lock=False) as opened:
        found = opened.verify()
    for line in found.damage:
        click.echo(f"journal database damaged: {line}")
    for entry_id in found.lost:
        click.echo(f"journal entry {entry_id} is unreadable (its row is damaged)")
    if found.unreachable:
        click.echo("journal database damaged: some entries may be lost without a readable id")
    for entry_id in found.failed:
        click.echo(f"journal entry {entry_id} failed authentication")
    print_json(
        {
            "checked": found.checked,
            "failed": found.failed,
            "damage": found.damage,
            "lost": found.lost,
            "unreachable": found.unreachable,
        }
    )
    if found.damage:
        raise StateError(
            "the journal database is damaged: `singularity journal salvage` keeps what is "
            "readable (the living being does so at its next start)"
        )
    if found.failed:
        count = len(found.failed)
        raise StateError(f"{count} journal entr{'y' if count == 1 else 'ies'} failed")


@journal.command("salvage")
@journal_options
def salvage(**params: Any) -> None:
    """Keep every readable entry of a damaged journal in a fresh file; set the old one aside."""
    with _opened(params, lock=True) as opened:
        done = opened.salvage()
    print_json(
        {
            "kept": done.kept,
            "lost": done.lost,
            "unreachable": done.unreachable,
            "set_aside": done.set_aside,
        }
    )


@journal.command()
@journal_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def destroy(yes: bool, **params: Any) -> None:
    """Delete every entry and the key (crypto-shredding): nothing can be recovered."""
    if not yes:
        click.confirm("Destroy the journal and its key for good?", abort=True)
    settings = settings_from(params, on_postgres=True)
    config = _config(settings)
    with _held(settings):
        try:
            journal = open_journal(config, create=False, recover=False)
        except KeyLost:
            journal = None  # the entries are unreadable already; only the files remain
        if journal is None:
            removed = remove_files(config)
            print_json({"destroyed": None, "removed": removed})
            return
        try:
            count: int | None = journal.stats()["entries"]
        except Damaged:
            count = None
        try:
            journal.destroy()
        except Damaged:
            journal.keyring.destroy()
            removed = remove_files(config)
            print_json({"destroyed": count, "removed": removed})
            return
        finally:
            journal.close()
    print_json({"destroyed": count})


@click.group("reasonlog")
def reasonlog_group() -> None:
    """The public reasonlog (`reasonlog.jsonl`)."""


def _reasonlog_dir(params: dict[str, Any]) -> str:
    """The directory of the being's reasonlog: its state directory, or for a being in
    PostgreSQL (which must be in the store) its local one, where its journal is too."""
    settings = settings_from(params, on_postgres=True)
    place = place_of(settings)
    if not place.is_postgres:
        return place.location
    if not holds_being_at(place, settings.agent_id):
        raise StateError(f"no being at {place.label(settings.agent_id)}")
    return settings.state_dir


@reasonlog_group.command()
@store_options
@click.option("-n", "count", type=click.IntRange(min=1), default=10, show_default=True)
def tail(count: int, **params: Any) -> None:
    """The newest entries, one JSON object per line, oldest first."""
    for entry in reasonlog.read(_reasonlog_dir(params))[-count:]:
        click.echo(compact(entry))


@reasonlog_group.command()
@store_options
@click.argument("entry_id")
def show(entry_id: str, **params: Any) -> None:
    """One entry by id."""
    for entry in reasonlog.read(_reasonlog_dir(params)):
        if entry.get("id") == entry_id:
            print_json(entry)
            return
    raise StateError(f"no reasonlog entry has id {entry_id}")
