"""Exact money: one range, exact arithmetic inside it, plain rendering, strict parsing.

The range is the original's 96-bit decimal: an amount is at most 2^96 − 1 USD in
absolute value and has at most 28 decimal places. Every amount that enters from outside
(configuration, state and journal files, a child's grant, revenue) is checked against
it, and a being's lifetime money (its starting balance plus everything it earned) stays
inside it, so every sum and difference the ledger takes is exact: the arithmetic context
traps any rounding instead of doing it.

Only a price can produce more than 28 places (a token price divided by a million, an
hourly price over elapsed nanoseconds): a charge is rounded **up** to the 28th place, so
a charge is never less than what was used and never zero when something was used.
"""

from __future__ import annotations

import decimal
import re
from decimal import Decimal

PLACES = 28
QUANTUM = Decimal(1).scaleb(-PLACES)
LIMIT = Decimal(2**96 - 1)
"""The largest amount: 79228162514264337593543950335 USD."""
LIMIT_TEXT = "79228162514264337593543950335"
ZERO = Decimal(0)
# Wide enough for every exact operation the ledger does, including a price times a
# 64-bit token count; `Inexact` is trapped, so nothing is ever silently rounded.
EXACT = decimal.Context(
    prec=120,
    rounding=decimal.ROUND_HALF_EVEN,
    traps=[decimal.Inexact, decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)
_CEILING = decimal.Context(prec=120, rounding=decimal.ROUND_CEILING)
_FLOOR = decimal.Context(prec=120, rounding=decimal.ROUND_FLOOR)
_NEAREST = decimal.Context(prec=120, rounding=decimal.ROUND_HALF_EVEN)
# Plain ASCII decimals, optionally with an exponent; the range check bounds the value.
_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class MoneyRangeError(ValueError):
    """An amount outside the money range."""


RANGE_TEXT = f"at most {LIMIT_TEXT} in absolute value with at most {PLACES} decimal places"


def in_range(value: Decimal) -> bool:
    """Whether `value` is a finite amount of the money range."""
    if not value.is_finite() or value.copy_abs() > LIMIT:
        return False
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    return exponent >= -PLACES or value == value.quantize(QUANTUM, context=_NEAREST)


def checked(value: Decimal, what: str = "money") -> Decimal:
    """`value` if it is in the range (trailing zeros beyond 28 places dropped), else an error."""
    if not in_range(value):
        raise MoneyRangeError(f"{what} must be {RANGE_TEXT}")
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    if exponent < -PLACES:
        return value.quantize(QUANTUM, context=_NEAREST)
    if exponent > 0:  # `1e3` is 1000: no exponent survives into a rendering
        return value.quantize(Decimal(1), context=_NEAREST)
    return value


def parse_money(value: object) -> Decimal:
    """Parse a decimal string or JSON number (as written) into the money range."""
    if isinstance(value, bool):
        raise ValueError("money must be a decimal string or number, not a boolean")
    if isinstance(value, int):
        if abs(value) > 2**96:
            raise MoneyRangeError(f"money must be {RANGE_TEXT}")
        result = Decimal(value)
    elif isinstance(value, float):
        result = Decimal(repr(value))  # the number as written, not its binary expansion
    elif isinstance(value, str):
        text = value.strip()
        if not _DECIMAL_TEXT.fullmatch(text):
            raise ValueError(f"not a decimal number: {value[:80]!r}")
        result = Decimal(text)
    elif isinstance(value, Decimal):
        result = value
    else:
        raise ValueError(f"money must be a decimal string or number, not {type(value).__name__}")
    if not result.is_finite():
        raise ValueError(f"money must be finite: {value!r}")
    return checked(result)


def from_binary(value: float) -> Decimal:
    """A JSON number's exact binary value, to the nearest 28th place (spec §8.3).

    `0.1` is 0.1000000000000000055511151231257827…, so it becomes
    `0.1000000000000000055511151231`. Outside the range, or a positive value too small to
    reach the 28th place, is a `MoneyRangeError`.
    """
    exact = Decimal(value)
    if not exact.is_finite() or exact.copy_abs() > LIMIT:
        raise MoneyRangeError(f"money must be {RANGE_TEXT}")
    exponent = exact.as_tuple().exponent
    assert isinstance(exponent, int)
    if exponent >= -PLACES:
        return exact
    nearest = exact.quantize(QUANTUM, context=_NEAREST)
    if nearest == 0 and exact != 0:
        raise MoneyRangeError(f"money must be {RANGE_TEXT}")
    return nearest


def round_up(value: Decimal) -> Decimal:
    """A computed charge to at most 28 places, rounded up; exact results keep their scale."""
    return _to_places(value, _CEILING)


def round_down(value: Decimal) -> Decimal:
    """An amount to at most 28 places, rounded down (a share that must not exceed its whole)."""
    return _to_places(value, _FLOOR)


def _to_places(value: Decimal, rounding: decimal.Context) -> Decimal:
    """`value` to at most 28 places under `rounding`; a value within them is kept as it is."""
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    if exponent >= -PLACES:
        return value
    return value.quantize(QUANTUM, context=rounding)


def render_money(value: Decimal) -> str:
    """Render in plain positional notation, keeping the scale (never exponent notation)."""
    if value == 0:
        value = abs(value)  # never render "-0"
    return format(value, "f")


def add(a: Decimal, b: Decimal) -> Decimal:
    """a + b, exactly."""
    return EXACT.add(a, b)


def sub(a: Decimal, b: Decimal) -> Decimal:
    """a - b, exactly."""
    return EXACT.subtract(a, b)


def mul(a: Decimal, b: Decimal) -> Decimal:
    """a * b, exactly (a price times a count)."""
    return EXACT.multiply(a, b)


def half(value: Decimal) -> Decimal:
    """value / 2, exactly (it may have one place more than `value`)."""
    return EXACT.divide(value, Decimal(2))


def ratio_up(a: Decimal, b: Decimal) -> Decimal:
    """a / b rounded up to 28 places (a price over a unit that may not divide it)."""
    return round_up(_CEILING.divide(a, b))
