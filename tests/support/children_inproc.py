"""In-process parents for the child tests: open a being, call its spawn tool, compare states."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from singularity.config import Settings, resolve
from singularity.domain.records import ToolCall
from singularity.runtime.being import LiveBeing, open_being
from singularity.runtime.family.children import SPAWN_CHILD, spawn_child_tools
from singularity.runtime.loop.tool_call import execute_tool_call
from singularity.storage.activity import Event
from singularity.tools.base import Outcome
from singularity.tools.catalogue import Catalogue
from singularity.tools.output_boundary import STRICT
from tests.support.children_procs import journal


def parent_settings(
    root: Path, name: str = "parent", *, secrets: Mapping[str, str] | None = None, **flags: str
) -> Settings:
    """Settings of a being at `<name>` with its workspace at `ws`, both relative to `root`,
    which must be the working directory (a child's import socket path must stay short).
    `secrets` stand for raw credentials in the environment; nothing else is read from it."""
    assert Path.cwd() == root, "chdir to the test directory first"
    (root / "ws").mkdir(exist_ok=True)
    values: dict[str, object] = {
        "state_dir": name,
        "workspace": "ws",
        "agent_name": name,
        "starting_balance": "10",
        **flags,
    }
    return resolve(values, environ=dict(secrets or {}))


def open_parent(settings: Settings, *, resume: bool = False) -> LiveBeing:
    """Open (creating and saving, or resuming) the being the settings describe."""
    being = open_being(settings, resume=resume)
    being.save()
    return being


_numbers = iter(range(1, 1 << 30))


def spawn_call(being: LiveBeing, settings: Settings, arguments: Any) -> Outcome:
    """Call `singularity_spawn_child` the way a cycle does: dispatch, record, journal, save."""
    number = next(_numbers)
    call: ToolCall = {
        "id": f"call_{number}",
        "type": "function",
        "function": {"name": SPAWN_CHILD.name, "arguments": json.dumps(arguments)},
    }
    catalogue = Catalogue([spawn_child_tools(being, settings)], boundary=STRICT)
    return asyncio.run(execute_tool_call(being, catalogue, call)).outcome


@dataclass(frozen=True)
class Snapshot:
    """What a failed spawn must leave as it was."""

    budget: dict[str, Any]
    children: list[dict[str, Any]]
    files: frozenset[str]
    events: list[Event]
    actions: int


def files_under(path: Path) -> frozenset[str]:
    """Every file and directory below `path`, relative, without the journal and state."""
    found = set()
    for base, dirs, files in os.walk(path):
        for name in dirs + files:
            relative = os.path.relpath(os.path.join(base, name), path)
            if relative not in ("activity.jsonl", "state.json"):
                found.add(relative)
    return frozenset(found)


def snapshot(being: LiveBeing, state_dir: Path) -> Snapshot:
    """The parent's money, children, files and journal now."""
    state = being.state
    return Snapshot(
        budget=state.budget.model_dump(mode="json"),
        children=[child.model_dump(mode="json") for child in state.mind.children],
        files=files_under(state_dir),
        events=journal(state_dir),
        actions=len(state.recent_actions),
    )
