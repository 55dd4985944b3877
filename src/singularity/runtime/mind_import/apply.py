"""Importing a mind (spec §15.5): into a stopped being directly, into a running one through
its state service (`service`); the document itself is `document`."""

from __future__ import annotations

import logging
import os
import stat
from typing import Any

from singularity.domain import events
from singularity.domain.state import AgentState
from singularity.errors import StateError, StateLockedError
from singularity.runtime.family.tree import is_alive
from singularity.runtime.mind_import.document import (
    ImportDocument,
    ImportReport,
    merge,
    parse_import,
    read_import_file,
)
from singularity.runtime.mind_import.service import SOCKET_NAME, socket_path, submit
from singularity.storage import fsio
from singularity.storage.statedir import STATE_FILE
from singularity.store.base import StateStore
from singularity.store.directory import DirectoryStore
from singularity.store.opening import StorePlace, holds_being_at, open_store_at
from singularity.timestamps import Clock, now_text, system_clock

log = logging.getLogger(__name__)
# The lock, not the saved status, tells whether a runtime is alive: a status left at
# `running` by a crash does not block an import.
RUNNING_MESSAGE = "the being is running; import through its local state service or stop it first"


def import_file(
    file: str, place: StorePlace, agent_id: str, timeout: float | None = None
) -> dict[str, Any]:
    """Import the file into the being at `place` (`agent_id` selects it in PostgreSQL),
    running or stopped; the report's JSON. A running being's answer is awaited at most
    `timeout` seconds (None: as long as it takes).

    The lock, not the socket, says whether the being lives (decision 27): a socket left by
    a killed runtime is removed by the offline import, under the lock. A being in
    PostgreSQL lives while a runtime holds its lease; a living one is reached through the
    state directory its runtime recorded in the store.
    """
    if place.is_postgres:
        return _import_in_store(file, place, agent_id, timeout)
    state_dir = place.location
    service = socket_path(state_dir)
    if os.path.lexists(service) and is_alive(state_dir):
        document = read_import_file(file)
        parse_import(document)
        return submit(service, document, timeout)
    return import_offline(file, state_dir).to_json()


def import_offline(file: str, state_dir: str, clock: Clock = system_clock) -> ImportReport:
    """Validate the file, then merge it into the stopped being at `state_dir` and save once.

    The being is recovered first (a redo log left by a kill is replayed) and checkpointed
    after the merge, so `state.json` alone holds the imported mind.
    """
    document = parse_import(read_import_file(file))
    try:
        store = DirectoryStore.open(state_dir)
    except StateLockedError:
        raise StateError(RUNNING_MESSAGE) from None
    try:
        remove_stale_socket(store.statedir.fd)
        missing = f"no being state exists at {os.path.join(state_dir, STATE_FILE)}"
        return _merged(store, document, missing, clock)
    finally:
        store.close()


def _import_in_store(
    file: str,
    place: StorePlace,
    agent_id: str,
    timeout: float | None,
    clock: Clock = system_clock,
) -> dict[str, Any]:
    """Import into the being `agent_id` of a PostgreSQL store: under its lease when it is
    stopped, through its import socket when it lives on this machine."""
    data = read_import_file(file)
    document = parse_import(data)
    missing = f"no being state exists for {place.label(agent_id)}"
    if not holds_being_at(place, agent_id):  # refused before the store is touched
        raise StateError(f"{missing}; create the being before importing")
    try:
        store = open_store_at(place, agent_id, create=False)
    except StateLockedError as held:
        from singularity.store.postgres.places import reachable_dir

        state_dir = reachable_dir(place.location, agent_id, f"{held}: {RUNNING_MESSAGE}")
        service = socket_path(state_dir)
        if not (os.path.lexists(service) and is_alive(state_dir)):
            raise StateError(f"{held}: {RUNNING_MESSAGE}") from None
        return submit(service, data, timeout)
    try:
        return _merged(store, document, missing, clock).to_json()
    finally:
        store.close()


def _merged(
    store: StateStore, document: ImportDocument, missing: str, clock: Clock
) -> ImportReport:
    """Merge the document into the being of an opened store; one step and a checkpoint
    when it is accepted, nothing written when it is refused."""
    state = store.load()
    if state is None:
        raise StateError(f"{missing}; create the being before importing")
    now = now_text(clock)
    report = merge(state, document, now)
    if report.accepted:
        store.commit(state, [events.encode(report.event(now))])
        store.checkpoint(state)
    return report


def merge_at_boot(state: AgentState, document: ImportDocument, now: str) -> ImportReport:
    """Merge the document a being is created with (`--import`); a refusal is a `StateError`,
    and the being is not created."""
    report = merge(state, document, now)
    if not report.accepted:
        refusal = refusal_message(
            report.conflicting, report.rejected, prefix="startup import refused", state="created"
        )
        raise StateError(refusal)
    return report


def remove_stale_socket(dir_fd: int) -> bool:
    """Remove the import socket a killed runtime left behind; the caller holds the lock, so
    no runtime serves it (decision 25). True when one was removed."""
    try:
        info = os.stat(SOCKET_NAME, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(info.st_mode):
        return False  # not ours: a runtime refuses to start over it, with its own message
    fsio.remove_file(dir_fd, SOCKET_NAME, point="import-socket")
    log.info("removed the import socket a stopped runtime left behind")
    return True


def refusal_message(
    conflicting: int, rejected: int, *, prefix: str = "import refused", state: str = "changed"
) -> str:
    """The message of a refused import (spec §15.5)."""
    return (
        f"{prefix}: {conflicting} conflicting and {rejected} rejected item(s); no state was {state}"
    )
