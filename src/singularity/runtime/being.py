"""A being opened for life: its locked state directory, its journal and its state in memory.

`open_being` applies the boot matrix and the resume gate of spec §4 before touching
anything but the lock, so a refused boot changes nothing on disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from singularity.config import Settings
from singularity.domain import events
from singularity.domain.identity import identity_from
from singularity.domain.state import AgentState
from singularity.errors import FatalIoError, StateError
from singularity.storage.activity import ActivityLog, Event
from singularity.storage.statedir import STATE_FILE, StateDir
from singularity.timestamps import Clock, now_text, system_clock


@dataclass
class LiveBeing:
    """The runtime's hold on one being; every change is journaled and saved through it."""

    statedir: StateDir
    activity: ActivityLog
    state: AgentState
    created: bool
    clock: Clock = system_clock

    def now(self) -> str:
        """The current time, rendered."""
        return now_text(self.clock)

    def journal(self, event: Event) -> None:
        """Append an event durably."""
        self.activity.append(event)

    def save(self) -> None:
        """Stamp `updated_at` and durably save; a failure marks the being failed and is fatal."""
        self.state.updated_at = self.now()
        try:
            self.statedir.save(self.state)
        except FatalIoError:
            self.fail()
            raise

    def fail(self) -> None:
        """Mark the being failed; the state file is not written again (decision 12)."""
        self.state.status = "failed"
        try:
            self.activity.append(events.stopped(self.now(), self.state.cycle, "failed"))
        except FatalIoError:
            pass

    def close(self) -> None:
        """Close the journal and release the lock."""
        self.activity.close()
        self.statedir.close()


def open_being(
    settings: Settings, *, resume: bool | None = None, clock: Clock = system_clock
) -> LiveBeing:
    """Open the state directory and apply the boot matrix; the new being is not yet saved."""
    resume = settings.resume if resume is None else resume
    statedir = StateDir.open(settings.state_dir)
    try:
        exists = statedir.has_state()
        if resume and not exists:
            raise StateError("resume requested but no state exists")
        if exists and not resume:
            raise StateError(
                f"state already exists at {os.path.join(settings.state_dir, STATE_FILE)}; "
                "use --resume or a new directory"
            )
        state = statedir.load() if exists else None
        if state is not None and state.identity != identity_from(settings):
            raise StateError("resume identity does not match configuration")
        statedir.remove_stale_temps()
        activity = ActivityLog.open(statedir.fd)
    except BaseException:
        statedir.close()
        raise
    if state is None:
        state = AgentState.new(
            identity_from(settings),
            settings.brama_model,
            settings.starting_balance,
            now_text(clock),
        )
    return LiveBeing(statedir, activity, state, created=not exists, clock=clock)
