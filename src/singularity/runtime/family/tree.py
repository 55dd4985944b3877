"""A being's family tree, read from each child's own `state.json` (the authority on its life)."""

from __future__ import annotations

import fcntl
import os
from typing import Any

from singularity.domain.state import AgentState
from singularity.errors import SingularityError, StateError
from singularity.money import render_money
from singularity.state_place import StorePlace
from singularity.storage.statedir import LOCK_FILE
from singularity.store.directory import peek_state

MAX_DEPTH = 32


PROC_LOCKS = "/proc/locks"


def _exclusive_flock_held(info: os.stat_result) -> bool | None:
    """Whether `/proc/locks` lists an exclusive flock on this file; None when unreadable."""
    key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as handle:
            lines = handle.readlines()
    except OSError:
        return None
    for line in lines:
        # `1: FLOCK  ADVISORY  WRITE 1234 fe:00:2179925 0 EOF`; waiters have `->` after the id.
        fields = line.split()
        if "->" in fields or len(fields) < 6:
            continue
        if fields[1] == "FLOCK" and fields[3] == "WRITE" and fields[5] == key:
            return True
    return False


def is_alive(state_dir: str) -> bool:
    """Whether a runtime holds the being's lock right now.

    On Linux the answer comes from `/proc/locks`, without touching the lock: even a shared
    lock held for a moment would make a child that is booting right then refuse to start.
    """
    try:
        fd = os.open(os.path.join(state_dir, LOCK_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        held = _exclusive_flock_held(os.fstat(fd))
        if held is not None:
            return held
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def family_tree(state_dir: str, depth: int = 0) -> list[dict[str, Any]]:
    """Each child of the being at `state_dir`, with its own children, as JSON-ready data."""
    state = peek_state(state_dir)
    if state is None:
        return []
    return _children(state, state_dir, depth, None)


def family_tree_at(place: StorePlace, agent_id: str, state_dir: str) -> list[dict[str, Any]]:
    """The family tree of the being at `place`; for a being in PostgreSQL, `state_dir` is
    its local state directory, where its children's own directories are.

    A child lives in its state directory under its parent's; in a fleet's PostgreSQL store
    a child is a being of the store itself, by its child id, its local files there. A store
    that holds no being `agent_id` is a `StateError`; nothing is written or held.
    """
    if not place.is_postgres:
        return family_tree(place.location)
    from singularity.store.opening import peek_state_at

    state = peek_state_at(place, agent_id)
    if state is None:
        raise StateError(f"no being state exists for {place.label(agent_id)}")
    return _children(state, state_dir, 0, place)


def _children(
    state: AgentState, state_dir: str, depth: int, place: StorePlace | None
) -> list[dict[str, Any]]:
    if depth >= MAX_DEPTH:
        return []
    tree = []
    for record in state.mind.children:
        # A relative record path was made from the parent's working directory; the child's
        # own place under this state directory does not depend on where we run from.
        child_dir = os.path.join(state_dir, "children", record.id)
        if not os.path.isdir(child_dir):
            child_dir = record.state_dir
        entry: dict[str, Any] = {
            "id": record.id,
            "name": record.name,
            "ticker": record.ticker,
            "state_dir": child_dir,
            "created_at": record.created_at,
            "alive": is_alive(child_dir),
        }
        try:
            child = peek_state(child_dir)
            if child is None and place is not None:
                child = _in_store(place, record.id, entry)
        except SingularityError as error:
            entry.update(status="unreadable", error=str(error), children=[])
            tree.append(entry)
            continue
        if child is None:
            entry.update(status="not started" if record.status != "withdrawn" else "withdrawn")
            entry["children"] = []
        else:
            entry.update(
                status=child.status,
                cycle=child.cycle,
                balance_usd=render_money(child.budget.remaining),
                starting_usd=render_money(child.budget.starting),
                children=_children(child, child_dir, depth + 1, place),
            )
        tree.append(entry)
    return tree


def _in_store(place: StorePlace, child_id: str, entry: dict[str, Any]) -> AgentState | None:
    """A child that is a being of the PostgreSQL store (a fleet's), by its child id; its
    entry names the store, and it is alive while a runtime holds its lease."""
    from singularity.store.opening import peek_state_at
    from singularity.store.postgres.census import lease_held

    child = peek_state_at(place, child_id)
    if child is not None:
        entry["place"] = place.label(child_id)
        entry["alive"] = entry["alive"] or lease_held(place.location, child_id)
    return child
