"""Revenue credited only from trusted evidence (spec §8.3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from singularity.money import MoneyRangeError, from_binary, parse_money

TRUSTED_PREFIXES = ("finance__", "trading__")
REVENUE_KEYS = ("revenue_usd", "realized_profit_usd")


def is_trusted(tool: str) -> bool:
    """Whether a tool's results may carry revenue."""
    return tool.startswith(TRUSTED_PREFIXES)


@dataclass
class Found:
    """What the search found: the amount to credit, and keys whose value left the range."""

    amount: Decimal | None = None
    out_of_range: list[str] = field(default_factory=list)


class _OutOfRange(Exception):
    pass


def _as_amount(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        # A JSON number is taken exactly from its binary value, as the spec says.
        return from_binary(value) if isinstance(value, float) else parse_money(value)
    except MoneyRangeError:
        raise _OutOfRange from None
    except (ValueError, ArithmeticError):
        return None


def _first_amount(value: Any, key: str, found: Found) -> Decimal | None:
    """Depth-first search (object members in sorted-key order) for the first parsable `key`.

    A value outside the money range does not parse, as in the original; it is noted.
    """
    stack: list[tuple[str | None, Any]] = [(None, value)]
    while stack:
        name, current = stack.pop()
        if name == key:
            try:
                amount = _as_amount(current)
            except _OutOfRange:
                found.out_of_range.append(key)
            else:
                if amount is not None:
                    return amount
        if isinstance(current, dict):
            stack.extend((member, current[member]) for member in sorted(current, reverse=True))
        elif isinstance(current, list):
            stack.extend((None, element) for element in reversed(current))
    return None


def find_revenue(tool: str, raw_result: Any) -> Found:
    """The strictly positive amount to credit for a tool's raw result, if any."""
    found = Found()
    if not is_trusted(tool):
        return found
    for key in REVENUE_KEYS:
        amount = _first_amount(raw_result, key, found)
        if amount is not None and amount > 0:
            found.amount = amount
            break
    return found


def trusted_revenue(tool: str, raw_result: Any) -> Decimal | None:
    """The strictly positive amount to credit for a tool's raw result, if any."""
    return find_revenue(tool, raw_result).amount
