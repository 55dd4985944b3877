"""Where a being of the fleet lives, and the settings a worker opens it with.

A worker is configured like `singularity run` (flags, environment, config file): gateway,
prices, limits, skills, secrets. A being's spec adds the options its operator gave it at
`fleet start` (identity, budget, loop and Pulse options; never a path or a secret, which
are the worker machine's), and its place in the state store.

The store is named by `--state-url`. Today the living loop keeps a being in a state
directory, so the fleet's store is a directory that holds one folder per being,
`<dir>/<key>/state` (its state directory) beside `<dir>/<key>/workspace`; a child lives in
its parent's `children/<id>/` and shares its family's workspace. `being_settings` is the
one place that turns a spec into settings: when the loop runs on the PostgreSQL state
store, it selects the being there by its agent id instead.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from singularity.config import (
    IDENTITY_OPTIONS,
    LOOP_OPTIONS,
    OPTIONS_BY_NAME,
    SANCTUM_OPTIONS,
    Settings,
    parse_option,
    resolve,
)
from singularity.errors import ConfigurationError
from singularity.fleet.messages import KEY_SEPARATOR, BeingSpec
from singularity.runtime.children import CHILDREN_DIR
from singularity.storage.statedir import STATE_FILE

KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
CHILD_ID_PATTERN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
STATE_FOLDER = "state"
WORKSPACE_FOLDER = "workspace"
BEING_OPTIONS = frozenset(
    {option.name for option in IDENTITY_OPTIONS + LOOP_OPTIONS}
    - {"agent_id", "workspace", "resume"}
    | {"brama_model", "max_tokens", "temperature"}
    | {option.name for option in SANCTUM_OPTIONS if option.name != "sanctum_dir"}
)
"""Options an operator may set per being; paths and secrets stay the worker's, and the
agent id is the key."""
POSTGRES_NOT_YET = (
    "--state-url {url}: the living loop does not run on the PostgreSQL state store yet; "
    "name a directory (one folder per being) for now"
)


def check_key(key: str) -> str:
    """A root being's key: letters, digits, `.`, `_`, `-` (it names a folder and a workflow)."""
    if not KEY_PATTERN.fullmatch(key):
        raise ConfigurationError(
            f"being key {key!r} must be 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return key


def check_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options of a spec, each one a being may have and valid as its flag would be."""
    checked: dict[str, str] = {}
    for name, value in options.items():
        if name not in BEING_OPTIONS:
            known = "unknown option" if name not in OPTIONS_BY_NAME else "not an option of a being"
            raise ConfigurationError(
                f"{name}: {known} (a being of the fleet may set: "
                f"{', '.join(sorted(BEING_OPTIONS))})"
            )
        if not isinstance(value, str):
            raise ConfigurationError(f"{name} must be given as text")
        parse_option(name, value)
        checked[name] = value
    return checked


@dataclass(frozen=True)
class FleetStore:
    """The fleet's state store: a directory of beings."""

    root: str

    @classmethod
    def parse(cls, url: str) -> FleetStore:
        """`--state-url`: a directory path or a `file://` URL."""
        parts = urlsplit(url)
        if parts.scheme in ("postgresql", "postgres"):
            raise ConfigurationError(POSTGRES_NOT_YET.format(url=_shown(url)))
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise ConfigurationError(f"--state-url {url}: a file URL names a local path")
            path = parts.path
        elif parts.scheme == "":
            path = url
        else:
            raise ConfigurationError(
                f"--state-url {url}: expected a directory or postgresql://… URL"
            )
        if not path:
            raise ConfigurationError("--state-url: empty path")
        return cls(os.path.abspath(path))

    def state_dir(self, key: str) -> str:
        """The state directory of the being with this key."""
        top, *children = split_key(key)
        path = os.path.join(self.root, top, STATE_FOLDER)
        for child in children:
            path = os.path.join(path, CHILDREN_DIR, child)
        return path

    def workspace(self, key: str) -> str:
        """The workspace of the being's family (a child shares its parent's, spec §14)."""
        return os.path.join(self.root, split_key(key)[0], WORKSPACE_FOLDER)

    def prepare(self, key: str) -> None:
        """Create the folders of a root being and its workspace (owner-only) before its
        first boot; the state directory is the runtime's to create."""
        top = os.path.join(self.root, split_key(key)[0])
        for path in (self.root, top, os.path.join(top, WORKSPACE_FOLDER)):
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)


def split_key(key: str) -> list[str]:
    """A key's parts: the root's key, then each child id down to the being."""
    parts = key.split(KEY_SEPARATOR)
    check_key(parts[0])
    for child in parts[1:]:
        if not CHILD_ID_PATTERN.fullmatch(child):
            raise ConfigurationError(f"being key {key!r}: {child!r} is not a child id")
    return parts


def child_key(parent: str, child_id: str) -> str:
    """The key of a parent's child."""
    return f"{parent}{KEY_SEPARATOR}{child_id}"


def being_settings(
    worker_params: Mapping[str, Any], config_file: str | None, store: FleetStore, spec: BeingSpec
) -> Settings:
    """The settings a worker opens this being with: its own, the spec's options over them,
    the being's place; resumed when the place already holds it."""
    params = dict(worker_params)
    params.update(check_options(spec.options))
    state_dir = store.state_dir(spec.key)
    params["state_dir"] = state_dir
    params["workspace"] = store.workspace(spec.key)
    params["resume"] = os.path.lexists(os.path.join(state_dir, STATE_FILE))
    params["agent_id"] = split_key(spec.key)[0]  # a child keeps its parent's (spec §14)
    return resolve(params, config_file=config_file)


def _shown(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)
