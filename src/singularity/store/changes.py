"""What one durable step changed in a being, found by comparing it with the last commit.

A `Tracker` keeps an image of the state as last committed: for every scalar and record
field, its JSON value and the objects it was made of; and a shallow copy of every list.
`diff` returns the `Changes` since then, and costs what the step changed, not what the
being holds: nothing is serialized but what is new, and the comparisons that find what
is not new run in C, item by item, without a call per item.

- A field is unchanged when it is made of the very same objects as at the commit (a
  record's fields, a list's items, recursively): its JSON is then the same. Otherwise it
  is encoded and compared with the image's JSON.
- A list is unchanged when it equals the image's copy (`==`, which takes an item found
  at the same place as the same without comparing it). When it is not, the step cut
  items at the front, kept a tail and added items: the first item is looked for by
  identity, then the kept tail is compared with `==` again.

The rule this relies on, which every writer of the state keeps: an item of a list (a
message, a memory, an action record, a rule) is replaced, never changed in place once
committed, and a replacement equal to the item it replaces (`==`) has its JSON. Children
are few and compared as a field, since spawning and withdrawing change a record's status
in place.

`apply_changes` replays `Changes` onto the JSON document of a state (`state.json` as
parsed), so a backend can rebuild the being from its last checkpoint.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from pydantic import BaseModel

from singularity.domain.state import AgentState

# Lists of items replaced, never changed in place: appended to, cut at the front.
IDENTITY_LISTS = (
    "conversation",
    "recent_actions",
    "mind.rules",
    "mind.learnings",
    "mind.memories",
    "created_resources.chat_ids",
    "created_resources.message_ids",
)
# Records (nested models) kept whole and compared by value; the rest of `mind` is scalars.
NESTED = ("mind", "created_resources")
Getter = Callable[[Any], Any]


@dataclass(frozen=True)
class ListChange:
    """A list after a step: `dropped` items cut from the front, then the next `kept` items
    of the old list, then `added` (JSON values)."""

    dropped: int
    kept: int
    added: list[Any]

    def to_json(self) -> list[Any]:
        """The compact form written to logs: `[dropped, kept, added]`."""
        return [self.dropped, self.kept, self.added]

    @classmethod
    def from_json(cls, value: Any) -> ListChange:
        """Read the compact form; ValueError when it is not one."""
        if (
            not isinstance(value, list)
            or len(value) != 3
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value[:2])
            or not isinstance(value[2], list)
        ):
            raise ValueError(f"not a list change: {value!r:.80}")
        return cls(value[0], value[1], value[2])


@dataclass(frozen=True)
class Changes:
    """Everything a step changed: fields set to new JSON values, lists changed."""

    fields: dict[str, Any] = field(default_factory=dict)
    lists: dict[str, ListChange] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.fields or self.lists)

    def to_json(self) -> dict[str, Any]:
        """`{"set": {path: value}, "lists": {path: [dropped, kept, added]}}`."""
        return {
            "set": self.fields,
            "lists": {path: change.to_json() for path, change in self.lists.items()},
        }

    @classmethod
    def from_json(cls, value: Any) -> Changes:
        """Read what `to_json` wrote; ValueError when it is not that."""
        if not isinstance(value, dict) or set(value) != {"set", "lists"}:
            raise ValueError("not a change set")
        fields, lists = value["set"], value["lists"]
        if not isinstance(fields, dict) or not isinstance(lists, dict):
            raise ValueError("not a change set")
        return cls(dict(fields), {path: ListChange.from_json(c) for path, c in lists.items()})

    def archived(self) -> int:
        """How many messages left the conversation window in this step."""
        change = self.lists.get("conversation")
        return change.dropped if change is not None else 0


def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_json(item) for item in value]
    return value


def _parts(value: Any, into: list[Any]) -> list[Any]:
    """The objects a field's JSON is made of, in order, with the length of each container:
    the very same parts make the same JSON."""
    into.append(value)
    if isinstance(value, BaseModel):
        items: Any = value.__dict__.values()
        if value.__pydantic_extra__:
            _parts(value.__pydantic_extra__, into)
    elif isinstance(value, list):
        into.append(len(value))
        items = value
    elif isinstance(value, dict):
        into.append(len(value))
        into.extend(value)
        items = value.values()
    else:
        return into
    if not any(map(isinstance, items, repeat(_CONTAINERS))):
        into.extend(items)  # a flat record or list: no call per item
        return into
    for item in items:
        if isinstance(item, _CONTAINERS):
            _parts(item, into)
        else:
            into.append(item)
    return into


_CONTAINERS = (BaseModel, list, dict)


def _same_objects(first: Sequence[Any], second: Sequence[Any]) -> bool:
    """Whether two sequences hold the very same objects (compared in C, not item by item)."""
    return len(first) == len(second) and all(map(operator.is_, first, second))


def _same_ends(first: list[Any], second: list[Any]) -> bool:
    """Whether two lists are as long and start and end with the same objects: only then is
    `==` asked, so that it compares the objects between by identity, not by value."""
    return len(first) == len(second) and (
        not first or (first[0] is second[0] and first[-1] is second[-1])
    )


def value_paths(state: AgentState) -> tuple[str, ...]:
    """Every field of the state compared by value, as dotted paths (`budget`, `mind.cycle`)."""
    return tuple(path for path, _ in _value_getters(state))


def _value_getters(state: AgentState) -> tuple[tuple[str, Getter], ...]:
    return _getters(type(state), tuple(type(getattr(state, name)) for name in NESTED))


@functools.cache
def _getters(
    top: type[BaseModel], nested: tuple[type[BaseModel], ...]
) -> tuple[tuple[str, Getter], ...]:
    inner = dict(zip(NESTED, nested, strict=True))
    paths: list[str] = []
    for name in top.model_fields:
        if name in inner:
            paths += [
                f"{name}.{field}"
                for field in inner[name].model_fields
                if f"{name}.{field}" not in IDENTITY_LISTS
            ]
        elif name not in IDENTITY_LISTS:
            paths.append(name)
    return tuple((path, operator.attrgetter(path)) for path in paths)


_LIST_GETTERS = tuple((path, operator.attrgetter(path)) for path in IDENTITY_LISTS)


def _list_change(old: list[Any], new: list[Any]) -> ListChange | None:
    """How `new` is `old` with items cut at the front, a tail kept, and items added."""
    if _same_ends(old, new) and old == new:
        return None
    dropped = len(old)
    if new:
        first = new[0]
        dropped = next((index for index, item in enumerate(old) if item is first), len(old))
    limit = min(len(old) - dropped, len(new))
    if not limit or (
        new[limit - 1] is old[dropped + limit - 1] and new[:limit] == old[dropped : dropped + limit]
    ):
        kept = limit  # the usual step: a whole tail kept, items appended
    else:
        kept = 0
        while kept < limit and new[kept] is old[dropped + kept]:
            kept += 1
    return ListChange(dropped, kept, [_json(item) for item in new[kept:]])


class Tracker:
    """The image of the state at its last commit, and what changed since."""

    def __init__(self) -> None:
        self._values: dict[str, Any] | None = None
        self._parts: dict[str, list[Any]] = {}
        self._lists: dict[str, list[Any]] = {}

    @property
    def started(self) -> bool:
        """Whether a commit (or a load) gave the tracker an image."""
        return self._values is not None

    def reset(self, state: AgentState) -> None:
        """Take the state as committed (after a load, a checkpoint or a whole write)."""
        self._values = {}
        for path, get in _value_getters(state):
            value = get(state)
            self._values[path] = _json(value)
            self._parts[path] = _parts(value, [])
        self._lists = {path: list(get(state)) for path, get in _LIST_GETTERS}

    def diff(self, state: AgentState) -> Changes:
        """What changed since the image (everything, when there is none); not yet taken."""
        values = self._values or {}
        fields = {}
        for path, get in _value_getters(state):
            current = get(state)
            parts = _parts(current, [])
            if path in values and _same_objects(parts, self._parts[path]):
                continue
            encoded = _json(current)
            if path not in values or encoded != values[path]:
                fields[path] = encoded
            else:  # new objects, the same JSON: the next step compares with these
                self._parts[path] = parts
        lists = {}
        for path, get in _LIST_GETTERS:
            change = _list_change(self._lists.get(path, []), get(state))
            if change is not None:
                lists[path] = change
        return Changes(fields, lists)

    def dropped(self, path: str, count: int) -> list[Any]:
        """The first `count` items of a list as last committed (messages leaving the window)."""
        return [_json(item) for item in self._lists.get(path, [])[:count]]

    def take(self, state: AgentState, changes: Changes) -> None:
        """Make the state, which `changes` describes, the new image."""
        if self._values is None:
            self.reset(state)
            return
        for path, value in changes.fields.items():
            self._values[path] = value
            self._parts[path] = _parts(operator.attrgetter(path)(state), [])
        # Every list, changed or not: one that compared equal may hold equal replacements,
        # and the next step looks for its items by identity.
        self._lists = {path: list(get(state)) for path, get in _LIST_GETTERS}


def _container(document: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    *parents, last = path.split(".")
    target = document
    for part in parents:
        inner = target.get(part)
        if not isinstance(inner, dict):
            raise ValueError(f"the state has no object at {part!r} for {path}")
        target = inner
    return target, last


def apply_changes(document: dict[str, Any], changes: Changes) -> list[Any]:
    """Replay a step onto a state's JSON document; returns the messages it archived.

    ValueError when the change does not fit the document (a list shorter than what the
    step kept of it): the change belongs to another state.
    """
    for path, value in changes.fields.items():
        target, name = _container(document, path)
        target[name] = value
    archived: list[Any] = []
    for path, change in changes.lists.items():
        target, name = _container(document, path)
        items = target.get(name, [])
        if not isinstance(items, list) or len(items) < change.dropped + change.kept:
            raise ValueError(f"{path} holds fewer items than the step kept")
        if path == "conversation":
            archived = items[: change.dropped]
        target[name] = items[change.dropped : change.dropped + change.kept] + change.added
    return archived
