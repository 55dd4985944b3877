"""`singularity children`: the family tree of a being."""

from __future__ import annotations

import unicodedata
from typing import Any

import click
from rich.markup import escape
from rich.tree import Tree

from singularity.cli.options import settings_from, store_options
from singularity.cli.output import console, print_json
from singularity.runtime.being import place_of
from singularity.runtime.family.tree import family_tree_at


@click.command()
@store_options
@click.option("--json", "as_json", is_flag=True, help="Print the tree as JSON.")
def children(as_json: bool, **params: Any) -> None:
    """Show a being's children and theirs: status, balance, cycle, whether alive.

    The being is in --state-dir, or with --state-url postgresql://… the one --agent-id
    names there (its children's directories are under its local --state-dir).
    """
    settings = settings_from(params, on_postgres=True)
    place = place_of(settings)
    tree = family_tree_at(place, settings.agent_id, settings.state_dir)
    if as_json:
        print_json(tree)
        return
    root = Tree(_shown(place.label(settings.agent_id) if place.is_postgres else settings.state_dir))
    _add(root, tree)
    console().print(root)


def _shown(value: object) -> str:
    """Text from a state file, safe for a terminal: no markup, control characters escaped."""
    text = "".join(
        f"\\x{ord(ch):02x}" if unicodedata.category(ch) == "Cc" else ch for ch in str(value)
    )
    return escape(text)


def _add(parent: Tree, entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        alive = "alive" if entry["alive"] else "not running"
        details = f"{_shown(entry['status'])}, {alive}"
        if "balance_usd" in entry:
            details += f", balance {_shown(entry['balance_usd'])} USD, cycle {entry['cycle']}"
        node = parent.add(
            f"[bold]{_shown(entry['name'])}[/bold] ({_shown(entry['ticker'])}) {details}"
        )
        _add(node, entry.get("children", []))
