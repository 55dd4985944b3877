"""Where a being of the fleet lives, and the settings a worker opens it with.

A worker is configured like `singularity run` (flags, environment, config file): gateway,
prices, limits, skills, secrets. A being's spec adds the options its operator gave it at
`fleet start` (identity, budget, loop and Pulse options; never a path or a secret, which
are the worker machine's), and its place in the state store.

The store is named by `--state-url`: a directory that holds one folder per being,
`<dir>/<key>/state` (its state directory) beside `<dir>/<key>/workspace`; a child lives in
its parent's `children/<id>/` and shares its family's workspace. Or a PostgreSQL state
store (`postgresql://…`), where the being is selected by its key as its agent id, its
local files (inbox, sanctum, private journal, workspace) in the same folders under the
worker's `--local-dir`. `being_settings` is the one place that turns a spec into settings.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from singularity.config import (
    IDENTITY_OPTIONS,
    LOOP_OPTIONS,
    OPTIONS_BY_NAME,
    SANCTUM_OPTIONS,
    Settings,
    parse_option,
    resolve,
)
from singularity.errors import ConfigurationError, StateLockedError
from singularity.fleet.messages import KEY_SEPARATOR, BeingSpec
from singularity.runtime.family.children import CHILDREN_DIR
from singularity.state_place import StorePlace, shown_url
from singularity.storage.funding import CLAIMED, GRANT, REVOKED
from singularity.storage.statedir import STATE_FILE
from singularity.store.opening import peek_state_at

KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
CHILD_ID_PATTERN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
GRANT_FILES = (GRANT, CLAIMED, REVOKED)
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
LOCAL_DIR_NEEDED = (
    "--state-url {url}: a PostgreSQL state store needs --local-dir (SINGULARITY_LOCAL_DIR), "
    "the folder on this machine for the beings' local files"
)
LOCAL_DIR_UNUSED = (
    "--local-dir {path}: only a PostgreSQL state store takes it; a directory store keeps "
    "the beings' local files in their folders"
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
    """The fleet's state store: a directory of beings, or a PostgreSQL store beside the
    worker's directory of local files (`root` holds the beings' folders either way)."""

    root: str
    url: str | None = None
    """The PostgreSQL store, if the beings' state lives there."""

    @classmethod
    def parse(cls, url: str, local_dir: str | None = None) -> FleetStore:
        """`--state-url` (a directory, a `file://` URL or `postgresql://…`) and, for a
        PostgreSQL store, `--local-dir`."""
        place = StorePlace.parse(url)
        if place.is_postgres:
            if not local_dir:
                raise ConfigurationError(LOCAL_DIR_NEEDED.format(url=place.shown()))
            return cls(os.path.abspath(local_dir), place.location)
        if local_dir is not None:
            raise ConfigurationError(LOCAL_DIR_UNUSED.format(path=local_dir))
        return cls(os.path.abspath(place.location))

    @property
    def place(self) -> StorePlace | None:
        """The PostgreSQL store, or None for a directory store."""
        return StorePlace.parse(self.url) if self.url is not None else None

    def shown(self) -> str:
        """The store for logs: the directory, or the URL without its password."""
        if self.url is None:
            return self.root
        return f"{shown_url(self.url)} (local files in {self.root})"

    def agent_id(self, key: str) -> str:
        """The agent id the being is opened with: its root's key in a directory store (a
        child keeps its parent's, spec §14). In PostgreSQL the agent id selects the being,
        so a child has its own there, its child id (under its parent's it would contend
        for its parent's lease)."""
        parts = split_key(key)
        return parts[-1] if self.url is not None else parts[0]

    def holds(self, key: str) -> bool:
        """Whether the store already holds this being (it is resumed, not created)."""
        place = self.place
        if place is None:
            return os.path.lexists(os.path.join(self.state_dir(key), STATE_FILE))
        return peek_state_at(place, self.agent_id(key)) is not None

    def state_dir(self, key: str) -> str:
        """The state directory of the being with this key (in PostgreSQL: its local files)."""
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

    def check_grant(self, key: str) -> None:
        """A child new to a PostgreSQL store opens only where its parent funded it: its
        grant is a file in its local state directory on that machine (elsewhere it would
        be created without its money); refused as busy, so its visit is tried again."""
        if self.url is None or len(split_key(key)) == 1 or self.holds(key):
            return
        state_dir = self.state_dir(key)
        if not any(os.path.lexists(os.path.join(state_dir, name)) for name in GRANT_FILES):
            raise StateLockedError(
                f"child {key} is not born yet and its grant is not on this machine: it opens "
                "first on the worker whose parent funded it"
            )


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
    params["state_dir"] = store.state_dir(spec.key)
    params["state_url"] = store.url
    params["workspace"] = store.workspace(spec.key)
    params["resume"] = store.holds(spec.key)
    params["agent_id"] = store.agent_id(spec.key)
    return resolve(params, config_file=config_file)
