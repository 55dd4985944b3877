"""The package's public face: what `singularity` exports, each from its home, loaded lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import singularity
from singularity.config import Settings, resolve
from singularity.errors import SingularityError
from singularity.runtime.loop.lifecycle import Runtime
from singularity.store.base import StateStore
from singularity.store.directory import DirectoryStore
from singularity.store.postgres.store import PostgresStore
from singularity.testing.scripted_server import Script, ScriptedServer, Turn, load_script
from singularity.tools.typed import tool
from singularity.version import __version__

SUPPORTED = {
    "DirectoryStore": DirectoryStore,
    "PostgresStore": PostgresStore,
    "Runtime": Runtime,
    "Script": Script,
    "ScriptedServer": ScriptedServer,
    "Settings": Settings,
    "SingularityError": SingularityError,
    "StateStore": StateStore,
    "Turn": Turn,
    "__version__": __version__,
    "load_script": load_script,
    "resolve": resolve,
    "tool": tool,
}


def test_all_names_the_supported_api() -> None:
    assert singularity.__all__ == sorted(SUPPORTED)


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_each_name_is_the_object_of_its_home_module(name: str) -> None:
    assert getattr(singularity, name) is SUPPORTED[name]


def test_a_name_outside_the_api_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'LiveBeing'"):
        _ = singularity.LiveBeing  # type: ignore[attr-defined]


def test_importing_the_package_imports_nothing_else() -> None:
    probe = "import sys, singularity; print(sorted(m for m in sys.modules if 'singularity' in m))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "['singularity', 'singularity.version']"
