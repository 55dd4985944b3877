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
  identity (by value for an equal replacement), then the kept tail is compared with `==`
  again, in place.
- Nothing is copied whole: a copy of a list touches the reference count of every item it
  holds, in memory gone cold while the previous step slept in its sync. `take` cuts and
  extends the image's copies by what changed, and leaves an unchanged one as it is; a
  list changed by the usual step was already made the new list by `diff`, for its one
  `==`, and left so for `take` (put back if `diff` is asked again first).

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
from decimal import Decimal
from itertools import compress, islice
from typing import Any

from pydantic import BaseModel

from singularity.domain.state import AgentState
from singularity.jsoncodec import compact_utf8

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


@dataclass(slots=True)  # not frozen, which costs a call a field to build: never changed
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


@dataclass(slots=True)  # never changed once built
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


_KEYS = {path: compact_utf8(path) for path in IDENTITY_LISTS}


def encode_changes(changes: Changes, messages: Sequence[bytes]) -> bytes:
    """`compact_utf8(changes.to_json())`, given the encoding of each message the step
    added to the conversation (so that each is encoded once, see `Tracker.encode`)."""
    lists = []
    for path, change in changes.lists.items():
        # Item by item: a flat item (an action record) is then written by pydantic-core.
        added = b",".join(messages if path == "conversation" else map(compact_utf8, change.added))
        key = _KEYS.get(path) or compact_utf8(path)
        lists.append(b"%b:[%d,%d,[%b]]" % (key, change.dropped, change.kept, added))
    return b'{"set":%b,"lists":{%b}}' % (compact_utf8(changes.fields), b",".join(lists))


# What a value is, by its type, found once per type: `isinstance` with a pydantic model
# goes through `ABCMeta.__instancecheck__`, far slower than a dict lookup.
_LEAF, _MODEL, _LIST, _DICT = range(4)
_KINDS: dict[type, int] = {}
_LEAVES: set[type] = {str, int, float, bool, type(None), Decimal}
"""The types known to be leaves (not records, lists or dicts), to test a flat container in C."""


def _kind(value: Any) -> int:
    kind = _KINDS.get(type(value))
    if kind is None:
        kind = _KINDS[type(value)] = (
            _MODEL
            if isinstance(value, BaseModel)
            else _LIST
            if isinstance(value, list)
            else _DICT
            if isinstance(value, dict)
            else _LEAF
        )
        if kind == _LEAF:
            _LEAVES.add(type(value))
    return kind


def _json(value: Any) -> Any:
    kind = _KINDS.get(type(value))
    if kind is None:
        kind = _kind(value)
    if kind == _MODEL:  # `model_dump(mode="json")` without its keyword arguments
        return value.__pydantic_serializer__.to_python(value, mode="json")
    if kind == _LIST:
        return [_json(item) for item in value]
    return value


def _parts(value: Any, into: list[Any]) -> list[Any]:
    """The objects a field's JSON is made of, in order, with the length of each container:
    the very same parts make the same JSON."""
    into.append(value)
    kind = _kind(value)
    if kind == _MODEL:
        items: Any = value.__dict__.values()
        if value.__pydantic_extra__:
            _parts(value.__pydantic_extra__, into)
    elif kind == _LIST:
        into.append(len(value))
        items = value
    elif kind == _DICT:
        into.append(len(value))
        into.extend(value)
        items = value.values()
    else:
        return into
    if _LEAVES.issuperset(map(type, items)):
        into.extend(items)  # a flat record or list: no call per item
        return into
    for item in items:
        if type(item) in _LEAVES:
            into.append(item)
        else:
            _parts(item, into)
    return into


def _same_objects(first: Sequence[Any], second: Sequence[Any]) -> bool:
    """Whether two sequences hold the very same objects (compared in C, not item by item)."""
    return len(first) == len(second) and all(map(operator.is_, first, second))


def _same_parts(value: Any, parts: list[Any]) -> bool:
    """Whether `_parts(value, [])` holds the very objects of `parts`, found without
    building it for the usual containers: a record of leaves, an empty list."""
    kind = _KINDS.get(type(value))
    if kind == _MODEL and not value.__pydantic_extra__:
        items = value.__dict__.values()
        if len(parts) == len(items) + 1 and _LEAVES.issuperset(map(type, items)):
            return parts[0] is value and all(map(operator.is_, items, islice(parts, 1, None)))
    elif kind == _LIST and not value:
        return len(parts) == 2 and parts[0] is value and parts[1] == 0
    return _same_objects(_parts(value, []), parts)


def _same_ends(first: list[Any], second: list[Any]) -> bool:
    """Whether two lists are as long and start and end with the same objects: only then is
    `==` asked, so that it compares the objects between by identity, not by value."""
    return len(first) == len(second) and (
        not first or (first[0] is second[0] and first[-1] is second[-1])
    )


def value_paths(state: AgentState) -> tuple[str, ...]:
    """Every field of the state compared by value, as dotted paths (`budget`, `mind.cycle`)."""
    return _snapshot(state)[0]


def _snapshot(state: AgentState) -> tuple[tuple[str, ...], tuple[Any, ...], tuple[Any, ...]]:
    """The value paths of a state, their values and its identity lists, fetched at once.

    They are read from the records' `__dict__`: an attribute of a pydantic model costs a
    `__getattr__` hook on each access.
    """
    top = state.__dict__
    nested = _NESTED(top)
    return _plan(type(state), *map(type, nested))(top, *map(_DICT_OF, nested))


_NESTED = operator.itemgetter(*NESTED)
_DICT_OF = operator.attrgetter("__dict__")
_Snapshot = Callable[..., tuple[tuple[str, ...], tuple[Any, ...], tuple[Any, ...]]]


@functools.cache
def _plan(top: type[BaseModel], *nested: type[BaseModel]) -> _Snapshot:
    """What `_snapshot` does for a state of these types: the value paths, and the values
    at them and at `IDENTITY_LISTS`, each from the `__dict__`s of the state and of its
    records (`NESTED`), taken with one `itemgetter` a record."""
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
    wanted = (*paths, *IDENTITY_LISTS)
    grouped: list[str] = []
    getters = []
    for owner in ("", *NESTED):
        names = [path.rpartition(".")[2] for path in wanted if path.rpartition(".")[0] == owner]
        getters.append(_items(names) if names else lambda record: ())
        grouped += [f"{owner}.{name}" if owner else name for name in names]
    if sorted(grouped) != sorted(wanted):
        raise ValueError(f"paths beyond the state's records: {wanted}")
    fields = tuple(paths)
    values = _items([grouped.index(path) for path in paths])
    lists = _items([grouped.index(path) for path in IDENTITY_LISTS])
    first, second, third = getters  # the state, and its two records

    def snapshot(
        top: dict[str, Any], mind: dict[str, Any], resources: dict[str, Any]
    ) -> tuple[tuple[str, ...], tuple[Any, ...], tuple[Any, ...]]:
        found = first(top) + second(mind) + third(resources)
        return fields, values(found), lists(found)

    return snapshot


def _items(keys: Sequence[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """`itemgetter` of several keys gives a tuple; of one, the item alone."""
    get = operator.itemgetter(*keys)
    return get if len(keys) > 1 else lambda container: (get(container),)


_CONVERSATION = IDENTITY_LISTS.index("conversation")
_LIST_AT = {path: index for index, path in enumerate(IDENTITY_LISTS)}
_INDICES = range(len(IDENTITY_LISTS))


def _containers(values: Sequence[Any]) -> list[int]:
    """Where the values that may change in place are: all but those of a known leaf type
    and frozen records of leaves."""
    leaves = map(_LEAVES.__contains__, map(type, values))
    maybe = compress(range(len(values)), map(operator.not_, leaves))
    return [index for index in maybe if _may_change(values[index])]


def _may_change(value: Any) -> bool:
    """Whether a value may change in place: not a leaf, nor a record frozen by its config
    whose fields are all leaves (as `Identity`), whose parts need no walk."""
    if type(value) in _LEAVES:
        return False
    return not (
        _kind(value) == _MODEL
        and value.model_config.get("frozen")
        and not value.__pydantic_extra__
        and _LEAVES.issuperset(map(type, value.__dict__.values()))
    )


_POSITIONS: dict[int, tuple[tuple[str, ...], dict[str, int]]] = {}


def _positions(paths: tuple[str, ...]) -> dict[str, int]:
    """Where each value path is in `paths` (one of `_plan`'s, kept while it lives), found
    by the identity of the tuple: hashing its paths would cost more than the lookup."""
    known = _POSITIONS.get(id(paths))
    if known is None or known[0] is not paths:
        known = _POSITIONS[id(paths)] = (paths, {path: index for index, path in enumerate(paths)})
    return known[1]


def _list_change(old: list[Any], new: list[Any]) -> ListChange | None:
    """How `new` is `old` with items cut at the front, a tail kept, and items added."""
    if _same_ends(old, new) and old == new:
        return None
    return _changed_list(old, new)


def _changed_list(old: list[Any], new: list[Any]) -> ListChange:
    """`_list_change` of lists known not to be equal (`_same_ends` and `==`), or equal
    only by value. `diff` asks it only when the step is not the usual one
    (`_aligned_change`)."""
    dropped = len(old)
    if new:
        first = new[0]
        found = next((index for index, item in enumerate(old) if item is first), None)
        if found is None:  # an equal replacement, or a new item: found by value, or not
            found = old.index(first) if first in old else len(old)
        dropped = found
    limit = min(len(old) - dropped, len(new))
    if not limit or (
        new[limit - 1] is old[dropped + limit - 1] and _holds(old, dropped, new, limit)
    ):
        kept = limit  # a whole tail kept, items appended
    else:
        kept = 0
        while kept < limit and (
            new[kept] is old[dropped + kept] or new[kept] == old[dropped + kept]
        ):
            kept += 1
    return ListChange(dropped, kept, [_json(item) for item in new[kept:]])


def _holds(old: list[Any], start: int, new: list[Any], count: int) -> bool:
    """Whether `old[start:start + count] == new[:count]`, found without copying either run.

    A copy of a list touches every item's reference count (the memory of each item, gone
    cold while the step slept in its sync); `==` of two lists skips the very same items
    without touching them. So `old` is made to line up with `new` for one `==`, by moving
    only the items outside the run, then put back.
    """
    head, tail, extra = old[:start], old[start + count :], new[count:]
    del old[start + count :]
    del old[:start]
    old += extra
    try:
        return old == new
    finally:
        del old[count:]
        old += tail
        old[:0] = head


def _aligned_change(
    old: list[Any], new: list[Any], index: int, aligned: dict[int, tuple[int, Any, int]]
) -> ListChange | None:
    """`_changed_list` of the usual step (nothing or one item cut, the whole tail kept,
    items appended), found by making `old` the new list in place for one `==`, as `_holds`
    does, but left so when it is: `aligned[index]` then says how to put it back (items cut,
    the item cut, items added), and `take` has nothing left to apply to it. None, with
    `old` as it was, when the step is not the usual one."""
    first = new[0]
    dropped = 0 if old[0] is first else 1 if len(old) > 1 and old[1] is first else -1
    kept = len(old) - dropped
    if dropped < 0 or kept > len(new) or new[kept - 1] is not old[-1]:
        return None
    head = old[0]
    added = new[kept:]
    if dropped:
        del old[0]
    old += added
    if old == new:
        aligned[index] = (dropped, head, len(added))
        return ListChange(dropped, kept, list(map(_json, added)))
    del old[kept:]
    if dropped:
        old.insert(0, head)
    return None


def _apply(image: list[Any], change: ListChange, new: list[Any]) -> None:
    """Make `image` (the old list) the `new` list that `change` describes, in place:
    only the items cut and added are touched."""
    del image[change.dropped + change.kept :]
    del image[: change.dropped]
    image += new[change.kept :]


_Seen = tuple[Changes, tuple[str, ...], tuple[Any, ...], tuple[Any, ...], list[int]]


class Tracker:
    """The image of the state at its last commit, and what changed since.

    The value fields are fetched together, in the order of `value_paths`: one that is
    the very object it was is unchanged, unless it is a container (a record, a list),
    whose parts are then compared; only the others are encoded.
    """

    def __init__(self, *, archives: bool = False) -> None:
        self._archives = archives
        """Whether `dropped_encoded` will be asked: the window is then encoded at `reset`."""
        self._values: dict[str, Any] | None = None
        """The JSON of each value field as last committed."""
        self._objects: list[Any] = []
        """The objects of the value fields as last committed, in path order."""
        self._containers: list[int] = []
        """Where in `_objects` the containers are; `_parts` holds what each is made of."""
        self._parts: dict[str, list[Any]] = {}
        self._lists: list[list[Any]] = [[] for _ in IDENTITY_LISTS]
        """A shallow copy of every identity list, in the order of `IDENTITY_LISTS`."""
        self._messages: list[bytes | None] = []
        """The encoding of each message of the conversation image, where it was logged."""
        self._encoded: tuple[Changes, list[bytes]] | None = None
        """The last changes `encode` wrote, with the encodings of the messages they add."""
        self._seen: _Seen | None = None
        """The last `diff`, with the objects and the lists it found and where the objects
        were replaced: what `take` makes the image when it is given that diff."""
        self._aligned: dict[int, tuple[int, Any, int]] = {}
        """The images of the lists the last `diff` found changed by the usual step, and
        left as the new lists (`_aligned_change`): what puts each back, by its index."""

    @property
    def started(self) -> bool:
        """Whether a commit (or a load) gave the tracker an image."""
        return self._values is not None

    def reset(self, state: AgentState) -> None:
        """Take the state as committed (after a load, a checkpoint or a whole write)."""
        paths, current, lists = _snapshot(state)
        self._values = {path: _json(value) for path, value in zip(paths, current, strict=True)}
        self._objects = list(current)
        self._containers = _containers(current)
        self._parts = {paths[i]: _parts(current[i], []) for i in self._containers}
        self._lists = list(map(list, lists))
        self._aligned.clear()
        window = self._lists[_CONVERSATION]
        # At a load or a checkpoint, not when a message leaves the window after it.
        self._messages = (
            [compact_utf8(_json(item)) for item in window]
            if self._archives
            else [None] * len(window)
        )
        self._encoded = None

    def diff(self, state: AgentState) -> Changes:
        """What changed since the image (everything, when there is none); not yet taken."""
        if self._aligned:
            self._put_back()
        paths, current, current_lists = _snapshot(state)
        values = self._values
        replaced = list(compress(range(len(current)), map(operator.is_not, current, self._objects)))
        if values is None:
            fields = {path: _json(value) for path, value in zip(paths, current, strict=True)}
        else:
            fields = self._changed_fields(paths, current, values, replaced)
        lists = {}
        aligned = self._aligned
        for index, old, new in zip(_INDICES, self._lists, current_lists, strict=False):
            if len(old) == len(new) and (
                not old or (old[0] is new[0] and old[-1] is new[-1] and old == new)
            ):
                continue  # the usual list: not touched
            change = _aligned_change(old, new, index, aligned) if old and new else None
            lists[IDENTITY_LISTS[index]] = _changed_list(old, new) if change is None else change
        changes = Changes(fields, lists)
        self._seen = (changes, paths, current, current_lists, replaced)
        return changes

    def _put_back(self) -> None:
        """Make the images `diff` left as the new lists the old ones again."""
        for index, (dropped, head, added) in self._aligned.items():
            image = self._lists[index]
            del image[len(image) - added :]
            if dropped:
                image.insert(0, head)
        self._aligned.clear()

    def _changed_fields(
        self,
        paths: tuple[str, ...],
        current: tuple[Any, ...],
        values: dict[str, Any],
        replaced: list[int],
    ) -> dict[str, Any]:
        objects, parts = self._objects, self._parts
        candidates = list(replaced)
        for index in self._containers:
            if current[index] is objects[index] and not _same_parts(
                current[index], parts[paths[index]]
            ):
                candidates.append(index)  # the same record, changed in place
        fields = {}
        refreshed = False
        for index in sorted(candidates):
            path, value = paths[index], current[index]
            encoded = value if type(value) in _LEAVES else _json(value)  # a leaf is its JSON
            if encoded != values[path]:
                fields[path] = encoded
            else:  # new objects, the same JSON: the next step compares with these
                objects[index] = value
                parts[path] = _parts(value, [])
                refreshed = True
        if refreshed:
            self._containers = _containers(objects)
        return fields

    def encode(self, changes: Changes) -> bytes:
        """The compact UTF-8 JSON of `changes` (from the last `diff`), as `to_json` gives
        it; the encodings of the messages it adds are kept for `dropped_encoded`."""
        conversation = changes.lists.get("conversation")
        messages = list(map(compact_utf8, conversation.added)) if conversation else []
        self._encoded = (changes, messages)
        return encode_changes(changes, messages)

    def dropped_encoded(self, count: int) -> list[bytes]:
        """The compact UTF-8 JSON of the first `count` messages of the conversation as last
        committed: the very bytes their step logged, when this tracker encoded it."""
        if not count:
            return []  # nothing left the window
        if count == 1:  # the usual step of a full window
            message = self._messages[0]
            if message is None:
                self._put_back()  # the image as last committed: `take` applies the change
                message = compact_utf8(_json(self._lists[_CONVERSATION][0]))
            return [message]
        self._put_back()
        items = self._lists[_CONVERSATION][:count]
        known = self._messages[:count]
        return [
            message if message is not None else compact_utf8(_json(item))
            for item, message in zip(items, known, strict=True)
        ]

    def take(self, state: AgentState, changes: Changes) -> None:
        """Make the state, which `changes` describes, the new image.

        Given the last `diff`, the image is what that diff found; given other changes,
        the state as it is now.
        """
        seen, self._seen = self._seen, None
        encoded, self._encoded = self._encoded, None
        if self._values is None:
            self.reset(state)
            return
        if seen is None or seen[0] is not changes:
            self.reset(state)  # changes of another state: take it whole
            return
        _, paths, current, lists, replaced = seen
        objects = self._objects
        # Only a replaced value can make a container of a value or a value of a container.
        for index in replaced:
            now, before = current[index], objects[index]
            if (type(now) not in _LEAVES or type(before) not in _LEAVES) and _may_change(
                now
            ) != _may_change(before):
                self._containers = _containers(current)
                break
        self._objects = list(current)
        if changes.fields:
            where = _positions(paths)
            for path, value in changes.fields.items():
                self._values[path] = value
                now = current[where[path]]
                if type(now) not in _LEAVES:  # the parts of a leaf are never asked
                    self._parts[path] = _parts(now, [])
        # A list left out of `changes` equals its image (`==`): the image stays; so does
        # one that `diff` left as the new list.
        aligned = self._aligned
        for path, change in changes.lists.items():
            index = _LIST_AT[path]
            if index not in aligned:
                _apply(self._lists[index], change, lists[index])
        aligned.clear()
        conversation = changes.lists.get("conversation")
        if conversation is not None:
            messages = self._messages
            del messages[conversation.dropped + conversation.kept :]
            del messages[: conversation.dropped]
            if encoded is not None and encoded[0] is changes:
                messages += encoded[1]
            else:
                messages += [None] * len(conversation.added)


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
