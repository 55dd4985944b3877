"""Commands that look at a being without animating it: `show`, `verify`, `tools`."""

from __future__ import annotations

import os
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from singularity.cli.options import settings_from, store_options, with_options
from singularity.cli.output import console, print_json
from singularity.config import ALL_OPTIONS, Settings
from singularity.errors import ConfigurationError, StateError
from singularity.runtime.being import place_of
from singularity.runtime.inspect.catalogue import offered_definitions
from singularity.runtime.inspect.summary import journal_summary, sanctum_summary, summarize
from singularity.runtime.inspect.verify import inspect_postgres, inspect_state_dir
from singularity.settings_check import check_skills_file
from singularity.skills import plan_skills, start_skills
from singularity.storage.statedir import STATE_FILE
from singularity.store.opening import peek_state_at
from singularity.tools.base import FunctionTool, FunctionToolset, Outcome, ToolDefinition
from singularity.tools.catalogue import Catalogue
from singularity.tools.output_boundary import STRICT

# `tools` spawns the skill servers with a fixed deadline and grace (spec §17).
TOOLS_DEADLINE_SECS = 120.0
TOOLS_OPTIONS = tuple(
    option
    for option in ALL_OPTIONS
    if option.name in ("agent_id", "skills_file", "most_token_file")
    or option.name.startswith("las_")
)


@click.command()
@store_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def show(as_json: bool, **params: Any) -> None:
    """Show a being: identity, status, budget, mind, newest memories, children."""
    settings = settings_from(params, on_postgres=True)
    place = place_of(settings)
    state = peek_state_at(place, settings.agent_id)
    if state is None and place.is_postgres:
        raise StateError(f"no being {settings.agent_id} in {place.shown()}")
    if state is None:
        raise StateError(f"no being state exists at {os.path.join(settings.state_dir, STATE_FILE)}")
    summary = summarize(state)
    summary["sanctum"] = sanctum_summary(settings)
    summary["journal"] = journal_summary(settings, state)
    if as_json:
        print_json(summary)
        return
    _render_summary(summary)


def _sanctum_line(sanctum: dict[str, Any]) -> str:
    if not sanctum["born"]:
        return "none yet"
    tended = f"tended {sanctum['tended']}" if sanctum["tended"] else "never tended"
    line = (
        f"{sanctum['memory_files']} memory files in {sanctum['folders']} folders, "
        f"{sanctum['session_notes']} session notes, {tended} "
        f"({sanctum['session_notes_since_tending']} notes since), "
        f"{sanctum['undistilled_raw']} undistilled raw, {sanctum['pending_items']} pending"
    )
    if sanctum["first_breath_unfinished"]:
        line += "; First Breath unfinished in " + ", ".join(sanctum["first_breath_unfinished"])
    return line


def _journal_line(journal: dict[str, Any]) -> str:
    state = journal["state"]
    if state == "none":
        return "none yet"
    if state == "key_lost":
        return "the key is gone: its entries can never be read again"
    if state != "ok":
        return f"unreadable ({journal.get('error', '')})"
    age = journal["oldest_age_hours"]
    oldest = f", oldest {age} h" if age is not None else ""
    return (
        f"{journal['entries']} entries ({journal['redacted']} redacted, "
        f"{journal['promoted']} promoted{oldest}) on {journal['backend']}, "
        f"embedder {journal['embedder']}"
    )


def _render_summary(summary: dict[str, Any]) -> None:
    out = console()
    identity = summary["identity"]
    budget = summary["budget"]
    mind = summary["mind"]
    out.print(
        f"[bold]{escape(identity['name'])}[/bold] ({escape(identity['ticker'])}), "
        f"specialized in {escape(identity['specialty'])}; agent {escape(identity['agent_id'])}"
    )
    out.print(
        f"status [bold]{summary['status']}[/bold], cycle {summary['cycle']}, "
        f"model {escape(summary['current_model'])}"
    )
    out.print(
        f"balance {budget['remaining']} USD of {budget['starting']} "
        f"(earned {budget['earned']}, spent {budget['api_spent']} on tokens and "
        f"{budget['instance_spent']} on instance time, {budget['children_funded']} to children; "
        f"{budget['total_tokens']} tokens)"
    )
    out.print(
        f"mind: prompt {mind['system_prompt_bytes']} bytes, {mind['rules']} rules, "
        f"{mind['learnings']} learnings, {mind['memories']} memories, "
        f"{mind['children']} children; conversation {summary['conversation_messages']} messages"
    )
    out.print("sanctum: " + escape(_sanctum_line(summary["sanctum"])))
    out.print("journal: " + escape(_journal_line(summary["journal"])))
    if summary["recent_actions"]:
        out.print("recent actions: " + escape(", ".join(summary["recent_actions"])))
    if summary["newest_memories"]:
        table = Table("kind", "memory", "created", title="newest memories")
        for memory in summary["newest_memories"]:
            table.add_row(escape(memory["kind"]), escape(memory["text"]), memory["created_at"])
        out.print(table)
    if summary["children"]:
        table = Table("id", "name", "ticker", "state dir", title="children")
        for child in summary["children"]:
            table.add_row(
                child["id"],
                escape(child["name"]),
                escape(child["ticker"]),
                escape(child["state_dir"]),
            )
        out.print(table)


@click.command()
@click.argument("directory", required=False, type=click.Path())
@store_options
def verify(directory: str | None, **params: Any) -> None:
    """Check every invariant of a being; list what is wrong and exit 4.

    The being is in DIRECTORY or --state-dir (default `.singularity`), or with --state-url
    postgresql://… the one --agent-id names there; it may be a living being.
    """
    given_dir = params.get("state_dir")
    settings = settings_from(params, on_postgres=True)
    if settings.state_url is not None:
        if directory is not None:
            raise click.UsageError("give one being: DIRECTORY or --state-url")
        where = place_of(settings).label(settings.agent_id)
        found = inspect_postgres(settings.state_url, settings.agent_id)
    else:
        where = settings.state_dir
        if directory is not None:
            if given_dir not in (None, directory):
                raise click.UsageError("give the state directory once: DIRECTORY or --state-dir")
            where = directory
        found = inspect_state_dir(where)
    for warning in found.warnings:
        click.echo(f"{where}: warning: {warning}")
    problems = found.problems
    if not problems:
        click.echo(f"{where}: ok")
        return
    for problem in problems:
        click.echo(f"{where}: {problem}")
    raise StateError(f"{where} failed verification: {len(problems)} problem(s)")


async def _never_called(arguments: dict[str, Any]) -> Outcome:
    raise AssertionError("a listed tool is never called")


def catalogue_definitions(settings: Settings) -> list[ToolDefinition]:
    """Every tool a being with these settings is offered, registered as at boot (skills,
    Most with a token, the built-ins, the sanctum's and the journal's); servers stopped."""
    entrypoint = settings.las_entrypoint
    if entrypoint is not None and not os.path.isfile(entrypoint):
        # The only configuration check of `tools` (spec §17): no release-pinning files.
        raise ConfigurationError(f"LAS entrypoint not found: {entrypoint}")
    check_skills_file(settings)
    skills = start_skills(
        plan_skills(settings), timeout=TOOLS_DEADLINE_SECS, grace=TOOLS_DEADLINE_SECS
    )
    try:
        skill_definitions = [d for toolset in skills.toolsets for d in toolset.definitions()]
    finally:
        skills.close()
    offered = offered_definitions(skill_definitions, with_most=settings.most_token_file is not None)
    listed = FunctionToolset([FunctionTool(d, _never_called) for d in offered])
    return Catalogue([listed], boundary=STRICT).definitions  # the registration rules of boot


@click.command()
@with_options(TOOLS_OPTIONS)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["json", "table"]),
    default="json",
    show_default=True,
    help="Output format.",
)
def tools(output_format: str, **params: Any) -> None:
    """List every tool a being is offered: skills (servers are started), Most, built-ins,
    sanctum and journal."""
    definitions = catalogue_definitions(settings_from(params, on_postgres=True))
    if output_format == "table":
        for definition in definitions:
            # One line per tool, even for a server's multi-line description.
            click.echo(f"{definition.name}\t{' '.join(definition.description.split())}")
        return
    print_json(
        [
            {"name": d.name, "description": d.description, "parameters": d.parameters}
            for d in definitions
        ]
    )
