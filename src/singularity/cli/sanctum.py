"""`singularity sanctum init | wake | map | export | import-memories | ls | grep | show | tend`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import click

from singularity.cli.options import AGENT_ID, settings_from, with_options
from singularity.cli.output import print_json
from singularity.config import (
    IDENTITY_OPTIONS,
    OPTIONS_BY_NAME,
    SANCTUM_OPTIONS,
    STATE_OPTIONS,
    STORE_OPTIONS,
    Settings,
)
from singularity.domain.identity import identity_from
from singularity.domain.state import AgentState
from singularity.errors import StateError
from singularity.sanctum import tools, writing
from singularity.sanctum.entries import export_folder, read_folder
from singularity.sanctum.extension import SanctumConfig, today
from singularity.sanctum.layout import Seed, initialize
from singularity.sanctum.names import SanctumRefusal
from singularity.sanctum.seam import Sanctum
from singularity.sanctum.store import SanctumStore, ensure_root
from singularity.sanctum.transfer import export_sanctum, memory_chunks
from singularity.sanctum.wake import map_text, wake
from singularity.store.base import NoBeing
from singularity.store.directory import peek_state
from singularity.store.opening import StorePlace, peek_state_at
from singularity.timestamps import system_clock

# Where the sanctum is; the Pulse options matter only to `init` and `pulse`.
SANCTUM_DIR_OPTIONS = (OPTIONS_BY_NAME["sanctum_dir"],)
store_sanctum_options = with_options(STATE_OPTIONS + STORE_OPTIONS + AGENT_ID + SANCTUM_DIR_OPTIONS)
"""A sanctum wherever its being lives: a folder, or the rows of a being in PostgreSQL."""


@click.group()
def sanctum() -> None:
    """Look after a being's sanctum: its human-readable memory (docs/concepts.md)."""


def _root(settings: Settings) -> str:
    return SanctumConfig.from_settings(settings).root


def _open(settings: Settings) -> SanctumStore:
    root = _root(settings)
    if not os.path.isdir(root) or os.path.islink(root):
        raise StateError(f"no sanctum at {root} (run `singularity sanctum init`)")
    return SanctumStore(root)


@contextlib.contextmanager
def _opened(
    settings: Settings, *, write: bool = False, unborn: bool = False
) -> Iterator[tuple[Sanctum, str]]:
    """The being's sanctum and where it is: its folder, or (`--state-url postgresql://…`)
    its rows, read without the lease, or with `write` under it (refused while the being
    runs). A sanctum not made yet is refused, unless `unborn` (rows only: `init` makes
    them, `wake` reads them)."""
    place = StorePlace.chosen(settings.state_dir, settings.state_url)
    if not place.is_postgres:
        settings = dataclasses.replace(settings, state_dir=place.location)
        store = _open(settings)
        try:
            yield store, _root(settings)
        finally:
            store.close()
        return
    from singularity.store.postgres.sanctum_rows import PostgresSanctum, held_sanctum
    from singularity.store.postgres.store import PostgresStore

    label = place.label(settings.agent_id)
    unmade = f"the {label} has no sanctum yet (it makes one when it starts)"
    if not write:
        sanctum = PostgresSanctum.peek(place.location, settings.agent_id)
        try:
            if sanctum.is_empty and not unborn:
                raise StateError(unmade)
            yield sanctum, label
        finally:
            sanctum.close()
        return
    try:  # without create: a being the store lacks is refused before anything is written
        being = PostgresStore.open(place.location, settings.agent_id, create=False)
    except NoBeing:
        raise StateError(f"no {label}") from None
    try:
        if being.load() is None:
            raise StateError(f"no {label}")
        held = held_sanctum(being, _root(settings))
        try:
            if held.is_empty and not unborn:
                raise StateError(unmade)
            yield held, label
        finally:
            held.close()
    finally:
        being.close()


def _context(store: Sanctum, root: str) -> tools.Context:
    return tools.Context(
        store, lambda: today(system_clock), lambda bodies: wake(store, root, bodies=bodies)
    )


def _run(
    settings: Settings, tool: Any, arguments: dict[str, Any], *, write: bool = False
) -> dict[str, Any]:
    """Run a sanctum tool for the operator; a refusal ends the command (exit 4)."""
    with _opened(settings, write=write) as (store, where):
        return _call(_context(store, where), tool, arguments)


def _call(context: tools.Context, tool: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    done = tool(context, arguments)
    content: dict[str, Any] = done.outcome.content
    if done.outcome.error_code is not None:
        raise StateError(f"sanctum: {content['message']} ({done.outcome.error_code})")
    return content


def _being_at(settings: Settings) -> tuple[AgentState | None, str]:
    """The being's state, read without its hold, and where it lives for messages (its
    state directory's path, or `being A in postgresql://…`)."""
    place = StorePlace.chosen(settings.state_dir, settings.state_url)
    where = place.label(settings.agent_id) if place.is_postgres else place.location
    return peek_state_at(place, settings.agent_id), where


@sanctum.command("init")
@with_options(IDENTITY_OPTIONS + STATE_OPTIONS + STORE_OPTIONS + SANCTUM_OPTIONS)
def init_command(**params: Any) -> None:
    """Create the sanctum, or finish one cut off half-way; an existing file is never touched."""
    settings = settings_from(params, on_postgres=True)
    config = SanctumConfig.from_settings(settings)
    pulse = (config.frequency, config.quiet_hours) if config.pulse else None
    if StorePlace.chosen(settings.state_dir, settings.state_url).is_postgres:
        state, where = _being_at(settings)
        if state is None:  # its rows are made under its lease, which a being must exist for
            raise StateError(f"no being at {where}")
        with _opened(settings, write=True, unborn=True) as (rows, where):
            birth = initialize(rows, Seed(state.identity, state.started_at[:10], pulse))
        click.echo(birth.report(where))
        return
    state = peek_state(settings.state_dir)
    identity = state.identity if state is not None else identity_from(settings)
    born = state.started_at[:10] if state is not None else today(system_clock)
    ensure_root(config.root)
    store = SanctumStore(config.root)
    try:
        store.remove_stale_temps()
        birth = initialize(store, Seed(identity, born, pulse))
    except SanctumRefusal as refusal:
        raise StateError(f"sanctum: {refusal.message}") from None
    finally:
        store.close()
    click.echo(birth.report(config.root))


@sanctum.command("wake")
@store_sanctum_options
@click.option("--pulse", "as_pulse", is_flag=True, help="Wake as for a pulse (MODE: PULSE).")
def wake_command(as_pulse: bool, **params: Any) -> None:
    """Print the wake text: identity files and the memory map, never a memory body."""
    settings = settings_from(params, on_postgres=True)
    place = StorePlace.chosen(settings.state_dir, settings.state_url)
    if place.is_postgres:
        with _opened(settings, unborn=True) as (sanctum, where):
            click.echo(wake(sanctum, where, pulse=as_pulse).text)
        return
    settings = dataclasses.replace(settings, state_dir=place.location)
    root = _root(settings)
    store = SanctumStore(root) if os.path.isdir(root) and not os.path.islink(root) else None
    try:
        click.echo(wake(store, root, pulse=as_pulse).text)
    finally:
        if store is not None:
            store.close()


@sanctum.command("map")
@store_sanctum_options
def map_command(**params: Any) -> None:
    """Print the memory map: folder counts, newest dated files, raw, tending, First Breath."""
    with _opened(settings_from(params, on_postgres=True)) as (store, where):
        woken = wake(store, where, bodies=False)
    if woken.memory is None:
        raise StateError(woken.text.splitlines()[1])
    click.echo(map_text(woken.memory, woken.unfinished))


@sanctum.command("export")
@click.argument("archive", required=False, type=click.Path(dir_okay=False))
@click.option("--to", "to", default=None, help="Write the sanctum as files to this new folder.")
@with_options(STATE_OPTIONS + STORE_OPTIONS + AGENT_ID + SANCTUM_DIR_OPTIONS)
def export_command(archive: str | None, to: str | None, **params: Any) -> None:
    """Write the sanctum to a new tar archive ARCHIVE, or as files to a new folder (--to).

    An archive is 0600, symlinks kept as links and never followed; a folder gets the
    latest version of every file, whole or not at all.
    """
    if (archive is None) == (to is None):
        raise click.UsageError("give either ARCHIVE or --to DIR")
    settings = settings_from(params, on_postgres=True)
    place = StorePlace.chosen(settings.state_dir, settings.state_url)
    if place.is_postgres:
        if to is None:
            raise click.UsageError("the sanctum of a PostgreSQL state store is exported with --to")
        from singularity.store.postgres.sanctum import peek_sanctum

        counted = export_folder(peek_sanctum(place.location, settings.agent_id), to)
        print_json({"exported": os.path.abspath(to), "files": counted})
        return
    settings = dataclasses.replace(settings, state_dir=place.location)
    root = _root(settings)
    _open(settings).close()  # the same checks as every command: it exists, is ours
    if to is not None:
        counted = export_folder(read_folder(root) or [], to)
        print_json({"exported": os.path.abspath(to), "files": counted})
        return
    assert archive is not None
    counted = export_sanctum(root, archive)
    print_json({"exported": os.path.abspath(archive), "files": counted})


@sanctum.command("import-memories")
@store_sanctum_options
def import_memories_command(**params: Any) -> None:
    """Write the being's memories (from its state) to raw/ as material to distill."""
    settings = settings_from(params, on_postgres=True)
    state, where = _being_at(settings)
    if state is None:
        raise StateError(f"no being at {where}")
    written = []
    with _opened(settings, write=True) as (store, root):
        context = _context(store, root)
        for index, chunk in enumerate(memory_chunks(state.mind.memories), start=1):
            descriptor = "memories" if index == 1 else f"memories-{index}"
            arguments = {"area": "mind", "descriptor": descriptor, "content": chunk}
            written.append(_call(context, writing.intake_tool, arguments)["path"])
    print_json({"memories": len(state.mind.memories), "written": written})


@sanctum.command("ls")
@click.argument("folder", required=False)
@store_sanctum_options
def ls_command(folder: str | None, **params: Any) -> None:
    """List a sanctum folder (default: the root) with file counts and sizes."""
    settings = settings_from(params, on_postgres=True)
    content = _run(settings, tools.list_tool, {"folder": folder})
    for entry in content["entries"]:
        if entry["type"] == "dir":
            click.echo(f"{entry['name']} ({entry['files']} files)")
        elif entry["type"] == "file":
            click.echo(f"{entry['name']} ({entry['bytes']} bytes)")
        else:
            click.echo(f"{entry['name']} (not a regular file)")
    if content["truncated"]:
        click.echo(f"… {content['total'] - len(content['entries'])} more")


@sanctum.command("grep")
@click.argument("text")
@click.option("--folder", default=None, help="Folder to search [default: memory].")
@store_sanctum_options
def grep_command(text: str, folder: str | None, **params: Any) -> None:
    """Find TEXT (case-insensitive) in sanctum files, newest dated files first."""
    settings = settings_from(params, on_postgres=True)
    content = _run(settings, tools.grep_tool, {"query": text, "folder": folder})
    for hit in content["hits"]:
        click.echo(hit)
    if content["truncated"]:
        click.echo("… more hits not shown")


@sanctum.command("show")
@click.argument("path")
@store_sanctum_options
def show_command(path: str, **params: Any) -> None:
    """Print one sanctum file."""
    with _opened(settings_from(params, on_postgres=True)) as (store, _):
        try:
            click.echo(store.read_text(tools.path_parts(path)).rstrip("\n"))
        except SanctumRefusal as refusal:
            raise StateError(f"sanctum: {refusal.message} ({refusal.code})") from None


@sanctum.command("tend")
@click.option("--stamp", is_flag=True, help="Stamp memory/.tended with today's date.")
@store_sanctum_options
def tend_command(stamp: bool, **params: Any) -> None:
    """Show what tending needs; with --stamp, record a tending pass done by hand."""
    settings = settings_from(params, on_postgres=True)
    if stamp:
        print_json(_run(settings, writing.tended_tool, {}, write=True))
        return
    with _opened(settings) as (store, where):
        woken = wake(store, where)
    if woken.memory is None:
        raise StateError(woken.text.splitlines()[1])
    memory = woken.memory
    click.echo(memory.tending_line())
    click.echo(f"undistilled raw files: {len(memory.undistilled)}")
    click.echo("tending due" if memory.tending_due else "nothing to tend")
