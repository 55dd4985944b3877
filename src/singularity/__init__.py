"""Singularity: a runtime for persistent, self-modifying autonomous digital beings.

The supported API is what `__all__` names: `Settings` and `resolve` (configuration),
`Runtime` (a booted being: `Runtime.boot(settings)`, then `once()` or `run()`), the state
stores (`StateStore`, `DirectoryStore`, `PostgresStore`), the error tree's root
`SingularityError`, and the scripted OpenAI-compatible server for tests (`ScriptedServer`,
`Script`, `Turn`, `load_script`), and `tool`, the decorator that makes a tool of a typed
function (its schema and argument checks derived from the annotations). Each is imported
on first use, so that importing the package (and starting the command line) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from singularity.config import Settings, resolve
    from singularity.errors import SingularityError
    from singularity.runtime.loop.lifecycle import Runtime
    from singularity.store.base import StateStore
    from singularity.store.directory import DirectoryStore
    from singularity.store.postgres.store import PostgresStore
    from singularity.testing.scripted_server import Script, ScriptedServer, Turn, load_script
    from singularity.tools.typed import tool

from singularity.version import __version__

_HOMES = {
    "Settings": "singularity.config",
    "resolve": "singularity.config",
    "SingularityError": "singularity.errors",
    "Runtime": "singularity.runtime.loop.lifecycle",
    "StateStore": "singularity.store.base",
    "DirectoryStore": "singularity.store.directory",
    "PostgresStore": "singularity.store.postgres.store",
    "ScriptedServer": "singularity.testing.scripted_server",
    "Script": "singularity.testing.scripted_server",
    "Turn": "singularity.testing.scripted_server",
    "load_script": "singularity.testing.scripted_server",
    "tool": "singularity.tools.typed",
}

__all__ = [
    "DirectoryStore",
    "PostgresStore",
    "Runtime",
    "Script",
    "ScriptedServer",
    "Settings",
    "SingularityError",
    "StateStore",
    "Turn",
    "__version__",
    "load_script",
    "resolve",
    "tool",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'singularity' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
