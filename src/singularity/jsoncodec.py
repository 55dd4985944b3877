"""JSON as the spec writes it: compact and pretty forms, and strict parsing.

Compact JSON (request bodies, journal lines, tool messages) has no whitespace and does
not escape non-ASCII. Pretty JSON (state.json, reports) is indented by two spaces.
Strict parsing refuses NaN/Infinity, duplicate keys and nesting deeper than
`MAX_DEPTH`: a deeper document would make later code (validation, saving, the output
boundary) hit Python's recursion limit, so it is refused where it enters, with a clear
error. Writing a value that contains itself is a ValueError that says where.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pydantic_core

from singularity.money import render_money
from singularity.text import safe_json

MAX_DEPTH = 64


def _default(value: object) -> object:
    if isinstance(value, Decimal):
        return render_money(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# Made once: `json.dumps` with arguments builds an encoder for every call.
_COMPACT = {
    sort_keys: json.JSONEncoder(
        separators=(",", ":"),
        ensure_ascii=False,
        sort_keys=sort_keys,
        check_circular=False,
        default=_default,
    )
    for sort_keys in (False, True)
}
# The C encoder those make on each call, made once: the same output, without the Python
# around it (a few microseconds on a small value). It does not look for cycles as it
# writes (its table of open containers would be shared by every thread): a value made of
# itself stops at the recursion limit, and only then is the value searched for the cycle.
_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # None without the C module
_C_COMPACT = (
    None
    if _MAKE_ENCODER is None
    else {
        sort_keys: _MAKE_ENCODER(
            None, _default, json.encoder.encode_basestring, None, ":", ",", sort_keys, False, True
        )
        for sort_keys in (False, True)
    }
)
_STRINGS = frozenset({str})
_PLAIN = frozenset({str, int, bool, type(None)})
"""Values pydantic-core writes as the json module does (not floats, not Decimals)."""


def compact(value: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON text: no whitespace, non-ASCII kept; ValueError for a value that
    contains itself or nests too deeply to write."""
    try:
        if _C_COMPACT is None:
            return _COMPACT[sort_keys].encode(value)
        return "".join(_C_COMPACT[sort_keys](value, 0))
    except RecursionError:
        raise _unwritable(value) from None


def compact_utf8(value: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON as UTF-8 bytes; a lone surrogate in it is written as U+FFFD, never raised.

    A flat dict or list of strings, integers, booleans and nulls (a plain message, an
    event) is written by pydantic-core's serializer, which writes those as `compact` does
    (strings: see `string_utf8`) and several times faster.
    """
    if not sort_keys and (
        (
            type(value) is dict
            and _PLAIN.issuperset(map(type, value.values()))
            and _STRINGS.issuperset(map(type, value))
        )
        or (type(value) is list and _PLAIN.issuperset(map(type, value)))
    ):
        try:
            return pydantic_core.to_json(value)
        except pydantic_core.PydanticSerializationError:  # a lone surrogate
            pass
    text = compact(value, sort_keys=sort_keys)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return compact(safe_json(value), sort_keys=sort_keys).encode("utf-8")


def string_utf8(text: str) -> bytes:
    """`compact_utf8(text)` for a string, written by pydantic-core's serializer: the same
    escapes (`\\"`, `\\\\`, the short forms, `\\u00XX` for other controls, non-ASCII
    kept), about three times faster on the large text of a system message."""
    try:
        return pydantic_core.to_json(text)
    except pydantic_core.PydanticSerializationError:  # a lone surrogate
        return compact_utf8(text)


def pretty(value: Any, *, sort_keys: bool = False) -> str:
    """Pretty JSON text with a two-space indent, non-ASCII kept; ValueError as `compact`."""
    try:
        return json.dumps(
            value,
            indent=2,
            ensure_ascii=False,
            sort_keys=sort_keys,
            check_circular=False,
            default=_default,
        )
    except RecursionError:
        raise _unwritable(value) from None


def _unwritable(value: Any) -> ValueError:
    """Why a value that reached the recursion limit cannot be written."""
    at = cycle_at(value)
    if at is None:
        return ValueError("cannot write JSON: the value nests too deeply")
    return ValueError(f"cannot write JSON: the value contains itself (a cycle) at {at}")


def _contents(item: Any) -> Iterator[tuple[str | int, Any]] | None:
    """A container's members as the encoder sees them, each with its key or index; None
    for anything else."""
    if isinstance(item, dict):
        return iter(item.items())
    if isinstance(item, list | tuple):
        return enumerate(item)
    return None


def cycle_at(value: Any) -> str | None:
    """The path (`$["key"][0]`) of the first member that is a container it is inside;
    None for a tree. Iterative, and the path is written only once found: a deep value
    neither reaches the recursion limit nor costs more than one visit of each member."""
    members = _contents(value)
    if members is None:
        return None
    inside = {id(value)}
    open_: list[tuple[int, str | int, Iterator[tuple[str | int, Any]]]] = [(id(value), "", members)]
    while open_:
        owner, _, members = open_[-1]
        for key, child in members:
            below = _contents(child)
            if below is None:
                continue
            if id(child) in inside:
                keys = [opened[1] for opened in open_[1:]] + [key]
                return "$" + "".join(
                    f"[{json.dumps(k) if isinstance(k, str) else k}]" for k in keys
                )
            inside.add(id(child))
            open_.append((id(child), key, below))
            break
        else:
            inside.discard(owner)
            open_.pop()
    return None


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def loads_strict(
    text: str | bytes,
    *,
    parse_float: Callable[[str], Any] | None = None,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """Parse JSON refusing NaN/Infinity, duplicate keys and deep nesting; raises ValueError."""
    try:
        document = json.loads(
            text,
            parse_float=parse_float,
            parse_constant=_refuse_constant,
            object_pairs_hook=_unique_object,
        )
    except RecursionError:
        raise ValueError(f"JSON nests deeper than {max_depth} levels") from None
    check_depth(document, max_depth, _openings(text))
    return document


def _openings(text: str | bytes) -> int:
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def check_depth(value: Any, max_depth: int = MAX_DEPTH, containers: int | None = None) -> None:
    """Raise ValueError when arrays and objects nest deeper than `max_depth` levels.

    `containers`, when known, bounds how many there are: fewer than the limit cannot nest
    past it, and the walk is skipped.
    """
    if containers is not None and containers <= max_depth:
        return
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            raise ValueError(f"JSON nests deeper than {max_depth} levels")
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
