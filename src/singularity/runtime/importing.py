"""`singularity import`: merge a mind-import document into a stopped being (spec §15.5)."""

from __future__ import annotations

import os

from singularity.domain import events
from singularity.domain.mind_import import ImportReport, merge, parse_import, read_import_file
from singularity.errors import StateError, StateLockedError
from singularity.storage.activity import ActivityLog
from singularity.storage.statedir import STATE_FILE, StateDir
from singularity.timestamps import Clock, now_text, system_clock

# The lock, not the saved status, tells whether a runtime is alive: a status left at
# `running` by a crash does not block an import.
RUNNING_MESSAGE = "the being is running; import through its local state service or stop it first"


def import_offline(file: str, state_dir: str, clock: Clock = system_clock) -> ImportReport:
    """Validate the file, then merge it into the being at `state_dir` and save once."""
    document = parse_import(read_import_file(file))
    try:
        statedir = StateDir.open(state_dir)
    except StateLockedError:
        raise StateError(RUNNING_MESSAGE) from None
    with statedir:
        state = statedir.load()
        if state is None:
            raise StateError(
                f"no being state exists at {os.path.join(state_dir, STATE_FILE)}; "
                "create the being before importing"
            )
        now = now_text(clock)
        report = merge(state, document, now)
        if report.accepted:
            activity = ActivityLog.open(statedir.fd)
            try:
                activity.append(
                    events.mind_imported(
                        now,
                        report.source_kind,
                        report.source_id,
                        report.imported,
                        report.attributed,
                        report.unchanged,
                    )
                )
                statedir.save(state)
            finally:
                activity.close()
    return report


def refusal_message(
    conflicting: int, rejected: int, *, prefix: str = "import refused", state: str = "changed"
) -> str:
    """The message of a refused import (spec §15.5)."""
    return (
        f"{prefix}: {conflicting} conflicting and {rejected} rejected item(s); "
        f"no state was {state}"
    )
