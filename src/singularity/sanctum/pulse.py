"""Pulse: scheduled quiet cycles. `PULSE.md` holds the frequency, quiet hours and tasks.

The runtime reads two lines of `PULSE.md`, `- Frequency: <N><s|m|h|d>` and
`- Quiet hours: <HH:MM-HH:MM>[, …] [UTC|±HH:MM]` (or `none`), and enforces quiet
hours itself: the configured quiet hours always apply, those in `PULSE.md` besides.
Everything else in the file is for the being.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from singularity.errors import ConfigurationError

_DURATION = re.compile(r"([0-9]{1,6})\s*(s|m|h|d)", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RANGE = re.compile(r"([0-9]{1,2}):([0-9]{2})\s*-\s*([0-9]{1,2}):([0-9]{2})")
_RANGE_TEXT = r"[0-9]{1,2}:[0-9]{2}\s*-\s*[0-9]{1,2}:[0-9]{2}"
_QUIET = re.compile(
    rf"(?P<ranges>{_RANGE_TEXT}(?:\s*,\s*{_RANGE_TEXT})*)\s*"
    r"(?:UTC|(?:UTC)?\s*(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2}))?",
    re.IGNORECASE,
)
_LINE = re.compile(r"\s*(?:[-*]\s*)?\**\s*(frequency|quiet hours)\s*\**\s*:\s*\**\s*(.*)", re.I)
MINUTES_PER_DAY = 24 * 60


@dataclass(frozen=True)
class QuietHours:
    """A daily window in which no pulse starts; `end` may be past midnight."""

    start: int
    """Minutes after midnight, at `offset` from UTC."""
    end: int
    offset: timedelta = timedelta(0)

    def contains(self, moment: datetime) -> bool:
        """Whether the window holds `moment` (an aware datetime)."""
        local = moment.astimezone(timezone(self.offset))
        minute = local.hour * 60 + local.minute
        if self.start == self.end:
            return True  # 00:00-24:00: the whole day
        if self.start < self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end

    def ends_after(self, moment: datetime) -> datetime:
        """The end of the window that holds `moment`."""
        local = moment.astimezone(timezone(self.offset))
        end = local.replace(hour=self.end // 60, minute=self.end % 60, second=0, microsecond=0)
        if end <= local:
            end += timedelta(days=1)
        return end

    def render(self) -> str:
        """`HH:MM-HH:MM ±HH:MM`."""
        sign = "-" if self.offset < timedelta(0) else "+"
        minutes = abs(int(self.offset.total_seconds())) // 60
        return (
            f"{self.start // 60:02d}:{self.start % 60:02d}-{self.end // 60:02d}:{self.end % 60:02d}"
            f" UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}"
        )


@dataclass(frozen=True)
class Schedule:
    """How often a pulse is due, and when none may start."""

    frequency: timedelta
    quiet: tuple[QuietHours, ...] = ()

    def quiet_at(self, moment: datetime) -> QuietHours | None:
        """The quiet window holding `moment`, if any."""
        return next((window for window in self.quiet if window.contains(moment)), None)

    def next_start(self, last: datetime | None, now: datetime) -> datetime:
        """When the next pulse may start: due by frequency, then outside quiet hours."""
        moment = now if last is None else max(now, last + self.frequency)
        for _ in range(len(self.quiet) * 2 + 1):
            window = self.quiet_at(moment)
            if window is None:
                return moment
            moment = window.ends_after(moment)
        return moment


def parse_frequency(text: str) -> timedelta:
    """`90s`, `30m`, `6h`, `1d` (optionally `every 6h`); `ValueError` otherwise."""
    body = text.strip().removeprefix("every").strip()
    match = _DURATION.fullmatch(body)
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"not a frequency: {text!r} (use e.g. 30m, 6h, 1d)")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_quiet_hours(text: str) -> tuple[QuietHours, ...]:
    """`none`, or `HH:MM-HH:MM[, HH:MM-HH:MM] [UTC|UTC±HH:MM|±HH:MM]`; `ValueError` otherwise."""
    body = text.strip().rstrip(".")
    if body.lower() in ("", "none", "no", "-"):
        return ()
    match = _QUIET.fullmatch(body)
    if match is None:
        raise ValueError(f"not quiet hours: {text!r} (use e.g. 22:00-07:00 UTC)")
    offset = timedelta(0)
    if match.group("sign"):
        minutes = int(match.group("oh")) * 60 + int(match.group("om"))
        offset = timedelta(minutes=minutes if match.group("sign") == "+" else -minutes)
    windows = []
    for found in _RANGE.finditer(match.group("ranges")):
        start_h, start_m, end_h, end_m = (int(part) for part in found.groups())
        if (
            start_h > 23
            or end_h > 24
            or start_m > 59
            or end_m > 59
            or abs(offset) >= timedelta(days=1)
        ):
            raise ValueError(f"not quiet hours: {text!r}")
        start, end = start_h * 60 + start_m, (end_h * 60 + end_m) % MINUTES_PER_DAY
        windows.append(QuietHours(start, end, offset))
    return tuple(windows)


def schedule_from(
    text: str | None, frequency: timedelta, quiet: tuple[QuietHours, ...]
) -> Schedule:
    """The schedule of a `PULSE.md` text over the configured one (quiet hours add up)."""
    # An unreadable line is ignored: the configured frequency and quiet hours stand.
    found_frequency = frequency
    found_quiet: tuple[QuietHours, ...] = ()
    for line in (text or "").splitlines():
        match = _LINE.fullmatch(line)
        if match is None:
            continue
        value = match.group(2).strip().strip("*").strip()
        try:
            if match.group(1).lower() == "frequency":
                found_frequency = parse_frequency(value)
            else:
                found_quiet += parse_quiet_hours(value)
        except ValueError:
            continue
    return Schedule(found_frequency, quiet + found_quiet)


def configured_schedule(
    frequency: str, quiet_hours: str
) -> tuple[timedelta, tuple[QuietHours, ...]]:
    """The configured frequency and quiet hours, or `ConfigurationError`."""
    try:
        return parse_frequency(frequency), parse_quiet_hours(quiet_hours)
    except ValueError as error:
        raise ConfigurationError(f"pulse: {error}") from None


def pulse_seed(frequency: str, quiet_hours: str) -> str:
    """The `PULSE.md` a sanctum starts with when Pulse is on."""
    quiet = quiet_hours.strip() or "none"
    return f"""# Pulse

A pulse is a scheduled quiet cycle: nobody is at the keyboard. The runtime reads the two
schedule lines below and enforces quiet hours itself; the rest of this file is yours.

## Schedule

- Frequency: {frequency.strip()}
- Quiet hours: {quiet}

## On quiet waking

1. Tend memory first: distill every undistilled raw file, merge files about one subject,
   correct standing files a recent session contradicted, raise what matters in
   memory/pending.md, then stamp with singularity_sanctum_tended.
2. Then the tasks below, most valuable first.
3. Then, if the pulse budget allows, reflect on recent session notes and note capability
   gaps for later.

## Tasks

| Task | Action |
|------|--------|
| (none yet) | Add the recurring work you decide on. |

## State

- Last pulse: never
"""
