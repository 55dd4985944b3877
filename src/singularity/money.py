"""Exact money: `Decimal` with 28 significant digits, plain rendering, strict parsing."""

from __future__ import annotations

import decimal
import re
from decimal import Decimal

MONEY_CONTEXT = decimal.Context(prec=28, rounding=decimal.ROUND_HALF_EVEN)
ZERO = Decimal(0)
# Plain ASCII decimals with a small exponent: nothing that renders as megabytes of digits.
_DECIMAL_TEXT = re.compile(
    r"[+-]?(?:[0-9]{1,60}(?:\.[0-9]{0,60})?|\.[0-9]{1,60})(?:[eE][+-]?[0-9]{1,2})?"
)
MAX_ADJUSTED_EXPONENT = 60


def parse_money(value: object) -> Decimal:
    """Parse a decimal string or JSON number exactly; refuse floats' NaN/inf and booleans."""
    if isinstance(value, bool):
        raise ValueError("money must be a decimal string or number, not a boolean")
    if isinstance(value, int):
        result = Decimal(value)
    elif isinstance(value, float):
        result = Decimal(repr(value))  # the number as written, not its binary expansion
    elif isinstance(value, str):
        text = value.strip()
        if not _DECIMAL_TEXT.fullmatch(text):
            raise ValueError(f"not a decimal number: {value!r}")
        result = Decimal(text)
    elif isinstance(value, Decimal):
        result = value
    else:
        raise ValueError(f"money must be a decimal string or number, not {type(value).__name__}")
    if not result.is_finite():
        raise ValueError(f"money must be finite: {value!r}")
    if result and abs(result.adjusted()) > MAX_ADJUSTED_EXPONENT:
        raise ValueError(f"money out of range: {value!r}")
    return result


def render_money(value: Decimal) -> str:
    """Render in plain positional notation, keeping the scale (never exponent notation)."""
    if value == 0:
        value = abs(value)  # never render "-0"
    return format(value, "f")


def add(a: Decimal, b: Decimal) -> Decimal:
    """a + b in the money context."""
    return MONEY_CONTEXT.add(a, b)


def sub(a: Decimal, b: Decimal) -> Decimal:
    """a - b in the money context."""
    return MONEY_CONTEXT.subtract(a, b)


def mul(a: Decimal, b: Decimal) -> Decimal:
    """a * b in the money context."""
    return MONEY_CONTEXT.multiply(a, b)


def div(a: Decimal, b: Decimal) -> Decimal:
    """a / b in the money context."""
    return MONEY_CONTEXT.divide(a, b)
