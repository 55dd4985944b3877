"""Where the console finds beings: a small interface, and its state-directory backend.

The console reads beings only through `BeingSource` and changes them only by handing
operator requests to the being (`deliver`), the same path `singularity say` takes. Two
backends implement it: `DirectorySource`, every state directory under a root, children
included; and `PostgresSource` (`singularity.console.postgres_source`), every being of a
PostgreSQL state store. Each being is named by a `key` that the backend alone interprets
(here the state directory's path below the root, `/` written `~`).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from singularity.console.follower import Follower
from singularity.domain.operator import OperatorRequest
from singularity.domain.records import ChatMessage
from singularity.domain.state import AgentState
from singularity.errors import SingularityError, StateError
from singularity.runtime.family.tree import family_tree, is_alive
from singularity.runtime.talk.operator_client import Delivery, deliver
from singularity.runtime.talk.transcript import all_messages
from singularity.sanctum.descriptors import MAX_READ_BYTES
from singularity.sanctum.names import SanctumRefusal
from singularity.sanctum.store import SanctumStore, parts_of
from singularity.storage import fsio, inbox
from singularity.storage.activity import read_from
from singularity.storage.statedir import STATE_FILE
from singularity.store.directory import peek_state
from singularity.store.redo import REDO_FILE

MAX_DEPTH = 6
KEYS_TTL_SECS = 1.0
ROOT_KEY = "@"
"""The key of a being whose state directory is the root itself."""
SKIPPED = frozenset(
    {"sanctum", "inbox", "logs", "workspace", "node_modules", "venv", "__pycache__"}
)
DEFAULT_STATE_DIR = ".singularity"
"""The one hidden folder searched for beings (hidden folders are skipped otherwise)."""


class UnknownBeing(StateError):
    """A key that names no being of this source."""


class OutOfReach(StateError):
    """An operator request for a being the console cannot hand it to."""


@dataclass(frozen=True)
class SanctumFile:
    """One file of a sanctum: its path and size."""

    path: str
    size: int


class BeingSource(Protocol):
    """Everything the console reads of beings, and the one way it acts on them."""

    @property
    def label(self) -> str:
        """Where the beings come from, for people."""
        ...

    def keys(self) -> list[str]:
        """Every being's key, parents before their children."""
        ...

    def state(self, key: str) -> AgentState:
        """A being's saved state."""
        ...

    def alive(self, key: str) -> bool:
        """Whether a runtime animates the being now."""
        ...

    def parent(self, key: str) -> str | None:
        """The key of the being's parent among this source's beings; None for a root."""
        ...

    def follower(self, key: str) -> Follower:
        """The being's journal, read up to now."""
        ...

    def messages(self, key: str, start: int = 0) -> list[ChatMessage]:
        """The being's messages from index `start` (archived ones included)."""
        ...

    def waiting(self, key: str) -> list[OperatorRequest]:
        """Operator requests the being has not applied yet."""
        ...

    def family(self, key: str) -> list[dict[str, Any]]:
        """The being's children, each with its own, and its `key` (None: not a being of
        this source)."""
        ...

    def sanctum_files(self, key: str) -> list[SanctumFile]:
        """The files of the being's sanctum."""
        ...

    def sanctum_text(self, key: str, path: str) -> str | None:
        """A sanctum file as text; None when it does not exist."""
        ...

    def out_of_reach(self, key: str) -> str | None:
        """Why operator requests cannot reach the being from here; None when they can."""
        ...

    def deliver(self, key: str, request: OperatorRequest) -> Delivery:
        """Hand an operator request to the being (OutOfReach when `out_of_reach` says so)."""
        ...


def _stamp(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_mtime_ns, info.st_size, info.st_ino


def _stamp_of(path: str) -> tuple[int, int, int] | None:
    """What changes when a file is written or replaced; None when there is no file."""
    try:
        return _stamp(os.stat(path))
    except FileNotFoundError:
        return None


def _is_dir(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode)


class DirectorySource:
    """The beings in the state directories under `root` (the root itself may be one)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        if not _is_dir(self.root):
            raise StateError(f"console root is not a directory: {root}")
        self._followers: dict[str, Follower] = {}
        self._states: dict[str, tuple[object, AgentState]] = {}
        self._keys: tuple[float, list[str]] | None = None

    @property
    def label(self) -> str:
        return f"state directories under {self.root}"

    # Keys and paths.

    def keys(self) -> list[str]:
        now = time.monotonic()
        if self._keys is None or now - self._keys[0] > KEYS_TTL_SECS:
            found: list[str] = []
            self._walk(self.root, 0, found)
            self._keys = (now, found)
        return list(self._keys[1])

    def _walk(self, path: str, depth: int, found: list[str]) -> None:
        if depth > MAX_DEPTH:
            return
        if os.path.isfile(os.path.join(path, STATE_FILE)):
            found.append(self._key_of(path))
            children = os.path.join(path, "children")
            if _is_dir(children):
                for name in sorted(os.listdir(children)):
                    self._walk(os.path.join(children, name), depth + 1, found)
            return
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return
        for name in names:
            child = os.path.join(path, name)
            hidden = name.startswith(".") and name != DEFAULT_STATE_DIR
            if name not in SKIPPED and not hidden and _is_dir(child):
                self._walk(child, depth + 1, found)

    def _key_of(self, path: str) -> str:
        relative = os.path.relpath(path, self.root)
        return ROOT_KEY if relative == "." else relative.replace(os.sep, "~")

    def path(self, key: str) -> str:
        """The state directory a key names; UnknownBeing unless it is one of `keys()`."""
        parts = [] if key == ROOT_KEY else key.split("~")
        if any(part in ("", ".", "..") or "/" in part or "\x00" in part for part in parts):
            raise UnknownBeing(f"no such being: {key}")
        path = os.path.join(self.root, *parts)
        if not os.path.isfile(os.path.join(path, STATE_FILE)) or key not in self.keys():
            raise UnknownBeing(f"no such being: {key}")
        return path

    # Reading.

    def state(self, key: str) -> AgentState:
        path = self.path(key)
        try:
            info = os.stat(os.path.join(path, STATE_FILE))
        except FileNotFoundError:
            raise UnknownBeing(f"no such being: {key}") from None
        # The current state is state.json with state.redo replayed: a step changes the log.
        stamp = (_stamp(info), _stamp_of(os.path.join(path, REDO_FILE)))
        cached = self._states.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        state = peek_state(path)
        if state is None:
            raise UnknownBeing(f"no such being: {key}")
        self._states[key] = (stamp, state)
        return state

    def alive(self, key: str) -> bool:
        return is_alive(self.path(key))

    def parent(self, key: str) -> str | None:
        return parent_key(key)

    def follower(self, key: str) -> Follower:
        path = self.path(key)
        follower = self._followers.setdefault(key, Follower())
        dir_fd = fsio.open_dir(path)
        try:
            events, offset = read_from(dir_fd, follower.offset)
        finally:
            os.close(dir_fd)
        if offset < follower.offset:
            follower = self._followers[key] = Follower()  # the journal was cut: read it again
            return self.follower(key)
        follower.add(events, offset)
        return follower

    def messages(self, key: str, start: int = 0) -> list[ChatMessage]:
        state = self.state(key)
        dir_fd = fsio.open_dir(self.path(key))
        try:
            return all_messages(dir_fd, state, start)
        finally:
            os.close(dir_fd)

    def waiting(self, key: str) -> list[OperatorRequest]:
        return waiting_in(self.path(key), self.follower(key))

    def family(self, key: str) -> list[dict[str, Any]]:
        tree = family_tree(self.path(key))
        _add_keys(tree, key)
        return tree

    def sanctum_files(self, key: str) -> list[SanctumFile]:
        return sanctum_files_in(self.path(key))

    def sanctum_text(self, key: str, path: str) -> str | None:
        return sanctum_text_in(self.path(key), path)

    # Acting.

    def out_of_reach(self, key: str) -> str | None:
        return None

    def deliver(self, key: str, request: OperatorRequest) -> Delivery:
        return deliver(self.path(key), request)


def _sanctum_of(state_dir: str) -> SanctumStore | None:
    root = os.path.join(state_dir, "sanctum")
    if not _is_dir(root):
        return None
    return SanctumStore(root)


def sanctum_files_in(state_dir: str) -> list[SanctumFile]:
    """The files of the sanctum in `state_dir`."""
    store = _sanctum_of(state_dir)
    if store is None:
        return []
    files: list[SanctumFile] = []
    try:
        for folder in store.tree(()):
            parts = tuple(part for part in folder.path.split("/") if part)
            sizes = {entry.name: entry.size for entry in store.entries(parts)}
            for name in folder.files:
                files.append(SanctumFile(f"{folder.path}{name}", sizes.get(name, 0)))
    except SingularityError:
        return files
    finally:
        store.close()
    return files


def sanctum_text_in(state_dir: str, path: str) -> str | None:
    """A file of the sanctum in `state_dir` as text; None when it does not exist."""
    store = _sanctum_of(state_dir)
    if store is None:
        return None
    try:
        return store.read_optional(parts_of(path), MAX_READ_BYTES)
    except SanctumRefusal:
        return None
    finally:
        store.close()


def waiting_in(state_dir: str, follower: Follower) -> list[OperatorRequest]:
    """The requests in the inbox of `state_dir` that the journal shows no application of."""
    dir_fd = fsio.open_dir(state_dir)
    try:
        posted = inbox.pending(dir_fd)
    finally:
        os.close(dir_fd)
    return [
        item.request
        for item in posted
        if item.request is not None and item.request.id not in follower.applied
    ]


def _add_keys(tree: list[dict[str, Any]], key: str) -> None:
    """Name each child of a family tree by its key (its folder under `children/`)."""
    for child in tree:
        folder = f"children~{child['id']}"
        child["key"] = folder if key == ROOT_KEY else f"{key}~{folder}"
        _add_keys(child.get("children", []), child["key"])


def parent_key(key: str) -> str | None:
    """The key of a child's parent (`a~children~<id>` → `a`), None for a root being."""
    parts = key.split("~")
    if len(parts) >= 3 and parts[-2] == "children":
        return "~".join(parts[:-2]) or ROOT_KEY
    return None


def depth_of(source: BeingSource, key: str, keys: Sequence[str]) -> int:
    """How many ancestors a being has among `keys`."""
    depth, parent, seen = 0, source.parent(key), {key}
    while parent is not None and parent in keys and parent not in seen:
        depth += 1
        seen.add(parent)
        parent = source.parent(parent)
    return depth
