"""The sanctum bound into a live being, and when its pulses are due.

Quiet hours are the runtime's to enforce: no pulse starts inside them. A pulse itself and
the schedule that lives pulses are in `runtime/loop/schedule.py`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial

from singularity.config import Settings
from singularity.domain import events
from singularity.errors import ConfigurationError, FatalIoError, SingularityError, StateError
from singularity.runtime.being import LiveBeing, place_of
from singularity.runtime.loop.extension import Extension
from singularity.sanctum.extension import SanctumConfig, SanctumCore
from singularity.sanctum.logged import Steps
from singularity.sanctum.names import PULSE_FILE
from singularity.sanctum.pulse import QuietHours, Schedule, schedule_from
from singularity.sanctum.riding import RidingSanctum
from singularity.sanctum.seam import Sanctum
from singularity.sanctum.store import SanctumStore, ensure_root
from singularity.store.directory import DirectoryStore
from singularity.store.opening import peek_events_at
from singularity.timestamps import Clock, parse_timestamp, render_timestamp


class SanctumExtension(SanctumCore, Extension):
    """The sanctum as one of a being's extensions."""


def sanctum_extension(being: LiveBeing, settings: Settings) -> SanctumExtension:
    """The sanctum of a being booted with these settings: its folder for a being in a state
    directory, versioned rows for a being in PostgreSQL."""
    config = SanctumConfig.from_settings(settings)
    opener: Callable[[], Sanctum] | None = None
    if isinstance(being.store, DirectoryStore):
        opener = partial(riding_folder, config.root, being.store)
    else:
        from singularity.store.postgres.sanctum_rows import held_sanctum
        from singularity.store.postgres.store import PostgresStore

        store = being.store
        if isinstance(store, PostgresStore):
            opener = partial(held_sanctum, store, config.root)
    return SanctumExtension(being, config, being.events_at_open, opener)


def riding_folder(root: str, steps: Steps) -> RidingSanctum:
    """The sanctum folder at `root` (made 0700 if missing), its appends riding in `steps`."""
    ensure_root(root)
    return RidingSanctum(root, steps)


def find_sanctum(extensions: Sequence[Extension]) -> SanctumExtension:
    """The sanctum among a being's extensions."""
    for extension in extensions:
        if isinstance(extension, SanctumExtension):
            return extension
    raise StateError("this being has no sanctum, which Pulse needs")


def peek_sanctum(settings: Settings) -> tuple[Sanctum, str] | None:
    """The being's sanctum, to read without its lock or lease, and where it is: its folder,
    or the rows of a being in PostgreSQL; None when it has none yet."""
    place = place_of(settings)
    if place.is_postgres:
        from singularity.store.postgres.sanctum_rows import PostgresSanctum

        rows = PostgresSanctum.peek(place.location, settings.agent_id)
        if rows.is_empty:
            rows.close()
            return None
        return rows, rows.label
    root = SanctumConfig.from_settings(settings).root
    if not os.path.isdir(root) or os.path.islink(root):
        return None
    return SanctumStore(root), root


def pulse_schedule(settings: Settings) -> Schedule:
    """The pulse schedule: `PULSE.md` over the configuration, read without the lock."""
    config = SanctumConfig.from_settings(settings, pulse=True)
    text = None
    try:
        found = peek_sanctum(settings)
    except SingularityError:
        found = None  # the boot that follows says what is wrong with the being
    if found is not None:
        store = found[0]
        try:
            text = store.read_optional((PULSE_FILE,))
        except SingularityError:
            text = None
        finally:
            store.close()
    return schedule_from(text, config.default_frequency, config.quiet)


def quiet_window(settings: Settings, clock: Clock) -> QuietHours | None:
    """The quiet hours holding the clock's now, read without locking or changing anything."""
    return pulse_schedule(settings).quiet_at(clock())


def last_pulse(settings: Settings) -> datetime | None:
    """When the being's last pulse finished, from its activity journal (read, not locked)."""
    try:
        journaled = peek_events_at(place_of(settings), settings.agent_id)
    except (FatalIoError, StateError, ValueError):
        return None  # the boot that follows says what is wrong with the being
    records = map(events.readable, journaled)
    found = [record for record in records if isinstance(record, events.PulseFinished)]
    try:
        return parse_timestamp(found[-1].at) if found else None
    except ValueError:
        return None


def pulse_due(settings: Settings, clock: Clock) -> str | None:
    """Why no pulse may start now (quiet hours, or not due yet); None when one may."""
    schedule = pulse_schedule(settings)
    now = clock()
    window = schedule.quiet_at(now)
    if window is not None:
        return f"quiet hours {window.render()}"
    start = schedule.next_start(last_pulse(settings), now)
    if start > now:
        return f"not due until {render_timestamp(start)}"
    return None


def next_pulse(sanctum: SanctumCore, now: datetime) -> str:
    """When the next pulse may start, rendered."""
    return render_timestamp(sanctum.schedule().next_start(sanctum.last_pulse, now))


def check_sanctum(settings: Settings, workspace_root: str) -> None:
    """Refuse bad Pulse options and a sanctum overlapping the workspace; touches nothing."""
    # Inside the workspace, the file tools would bypass the sanctum's naming rules.
    root = os.path.realpath(SanctumConfig.from_settings(settings).root)
    workspace = os.path.realpath(workspace_root)
    if os.path.commonpath([workspace, root]) in (workspace, root):
        raise ConfigurationError(
            f"sanctum and workspace must not contain each other: {root} / {workspace}"
        )
