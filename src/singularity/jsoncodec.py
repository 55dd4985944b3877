"""JSON as the spec writes it: compact and pretty forms, and strict parsing.

Compact JSON (request bodies, journal lines, tool messages) has no whitespace and does
not escape non-ASCII. Pretty JSON (state.json, reports) is indented by two spaces.
Strict parsing refuses NaN/Infinity and duplicate keys.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from singularity.money import render_money


def _default(value: object) -> object:
    if isinstance(value, Decimal):
        return render_money(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def compact(value: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON text: no whitespace, non-ASCII kept."""
    return json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys, default=_default
    )


def pretty(value: Any, *, sort_keys: bool = False) -> str:
    """Pretty JSON text with a two-space indent, non-ASCII kept."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=sort_keys, default=_default)


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def loads_strict(text: str | bytes, *, parse_float: Callable[[str], Any] | None = None) -> Any:
    """Parse JSON refusing NaN/Infinity and duplicate keys; raises ValueError."""
    return json.loads(
        text,
        parse_float=parse_float,
        parse_constant=_refuse_constant,
        object_pairs_hook=_unique_object,
    )
