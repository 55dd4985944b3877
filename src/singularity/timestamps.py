"""UTC RFC 3339 timestamps with a `Z` suffix and 0, 3, 6 or 9 fractional digits."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]

_PATTERN = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})"
)


def system_clock() -> datetime:
    """The current UTC time."""
    return datetime.now(UTC)


def render_timestamp(moment: datetime) -> str:
    """Render as `YYYY-MM-DDTHH:MM:SS[.fff|.ffffff]Z` in UTC."""
    moment = moment.astimezone(UTC)
    base = moment.strftime("%Y-%m-%dT%H:%M:%S")
    micros = moment.microsecond
    if micros == 0:
        return base + "Z"
    if micros % 1000 == 0:
        return f"{base}.{micros // 1000:03d}Z"
    return f"{base}.{micros:06d}Z"


def now_text(clock: Clock = system_clock) -> str:
    """The clock's current moment, rendered."""
    return render_timestamp(clock())


def is_timestamp(text: str) -> bool:
    """Whether the text is an RFC 3339 timestamp this runtime accepts on load."""
    return bool(_PATTERN.fullmatch(text))


def parse_timestamp(text: str) -> datetime:
    """Parse an accepted RFC 3339 timestamp (nanoseconds are cut to microseconds)."""
    if not is_timestamp(text):
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    head, _, rest = text.partition(".")
    if rest:
        digits = re.match(r"[0-9]+", rest)
        assert digits is not None
        frac = digits.group(0)
        text = f"{head}.{frac[:6].ljust(6, '0')}{rest[len(frac) :]}"
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
