"""`singularity journal …` and `singularity reasonlog …`: metadata and public text only.

No journal command ever prints journal text: `stats` gives counts and ages, `verify`
names failing rows by id. Commands that change the journal take the state directory's
lock, so they never race a living being; `stats` and `verify` only read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from singularity.cli.options import settings_from, with_options
from singularity.cli.output import print_json
from singularity.config import JOURNAL_OPTIONS, STATE_OPTIONS
from singularity.errors import StateError
from singularity.journal import reasonlog
from singularity.journal.extension import journal_config
from singularity.journal.service import Journal, open_journal
from singularity.jsoncodec import compact
from singularity.storage.statedir import StateDir

journal_options = with_options(STATE_OPTIONS + JOURNAL_OPTIONS)


@contextlib.contextmanager
def _opened(params: dict[str, Any], *, lock: bool) -> Iterator[Journal]:
    settings = settings_from(params)
    config = journal_config(settings)
    with contextlib.ExitStack() as stack:
        if lock:
            stack.enter_context(StateDir.open(settings.state_dir, create=False))
        journal = open_journal(config, create=False)
        if journal is None:
            raise StateError(f"no journal exists for the being at {settings.state_dir}")
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
    """Decrypt and authenticate every entry in memory; name the ones that fail (exit 4)."""
    with _opened(params, lock=False) as opened:
        checked, failed = opened.verify()
    for entry_id in failed:
        click.echo(f"journal entry {entry_id} failed authentication")
    print_json({"checked": checked, "failed": failed})
    if failed:
        raise StateError(f"{len(failed)} journal entr{'y' if len(failed) == 1 else 'ies'} failed")


@journal.command()
@journal_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def destroy(yes: bool, **params: Any) -> None:
    """Delete every entry and the key (crypto-shredding): nothing can be recovered."""
    if not yes:
        click.confirm("Destroy the journal and its key for good?", abort=True)
    with _opened(params, lock=True) as opened:
        count = opened.stats()["entries"]
        opened.destroy()
    print_json({"destroyed": count})


@click.group("reasonlog")
def reasonlog_group() -> None:
    """The public reasonlog (`reasonlog.jsonl`)."""


@reasonlog_group.command()
@with_options(STATE_OPTIONS)
@click.option("-n", "count", type=click.IntRange(min=1), default=10, show_default=True)
def tail(count: int, **params: Any) -> None:
    """The newest entries, one JSON object per line, oldest first."""
    settings = settings_from(params)
    for entry in reasonlog.read(settings.state_dir)[-count:]:
        click.echo(compact(entry))


@reasonlog_group.command()
@with_options(STATE_OPTIONS)
@click.argument("entry_id")
def show(entry_id: str, **params: Any) -> None:
    """One entry by id."""
    settings = settings_from(params)
    for entry in reasonlog.read(settings.state_dir):
        if entry.get("id") == entry_id:
            print_json(entry)
            return
    raise StateError(f"no reasonlog entry has id {entry_id}")
