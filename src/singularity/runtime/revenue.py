"""Revenue credited only from trusted evidence (spec §8.3)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from singularity.money import parse_money

TRUSTED_PREFIXES = ("finance__", "trading__")
REVENUE_KEYS = ("revenue_usd", "realized_profit_usd")


def is_trusted(tool: str) -> bool:
    """Whether a tool's results may carry revenue."""
    return tool.startswith(TRUSTED_PREFIXES)


def _as_amount(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        # A JSON number is taken exactly from its binary value, as the spec says.
        return Decimal(value) if isinstance(value, float) else parse_money(value)
    except (ValueError, ArithmeticError):
        return None


def _first_amount(value: Any, key: str) -> Decimal | None:
    """Depth-first search (object members in sorted-key order) for the first parsable `key`."""
    stack: list[tuple[str | None, Any]] = [(None, value)]
    while stack:
        name, current = stack.pop()
        if name == key:
            amount = _as_amount(current)
            if amount is not None and amount.is_finite():
                return amount
        if isinstance(current, dict):
            stack.extend((member, current[member]) for member in sorted(current, reverse=True))
        elif isinstance(current, list):
            stack.extend((None, element) for element in reversed(current))
    return None


def trusted_revenue(tool: str, raw_result: Any) -> Decimal | None:
    """The strictly positive amount to credit for a tool's raw result, if any."""
    if not is_trusted(tool):
        return None
    for key in REVENUE_KEYS:
        amount = _first_amount(raw_result, key)
        if amount is not None and amount > 0:
            return amount
    return None
