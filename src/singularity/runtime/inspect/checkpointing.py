"""`singularity checkpoint`: make a stopped being's `state.json` complete by itself.

A directory being's current state is `state.json` with `state.redo` replayed onto it
(docs/state-store.md). Checkpointing it takes the lock (a being a runtime holds is
refused: that runtime checkpoints at its own clean stop), replays the log, writes back
what a crash lost of the journal and the archive, and writes `state.json` whole beside
an empty log: a program that reads only being-v1 files then sees the whole being.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from singularity.errors import StateError
from singularity.storage.statedir import STATE_FILE
from singularity.store.directory import DirectoryStore, replay


@dataclass(frozen=True)
class Checkpointed:
    """What a checkpoint did."""

    state_dir: str
    replayed_steps: int
    cycle: int
    status: str

    def to_json(self) -> dict[str, Any]:
        """The report `singularity checkpoint` prints: its fields, in order."""
        return asdict(self)


def checkpoint_state_dir(path: str) -> Checkpointed:
    """Checkpoint the stopped being at `path` (StateLockedError while a runtime holds it)."""
    if not os.path.lexists(path):
        raise StateError(f"no being state exists at {os.path.join(path, STATE_FILE)}")
    store = DirectoryStore.open(path, create=False)
    try:
        statedir = store.statedir
        if not statedir.has_state():
            raise StateError(f"no being state exists at {os.path.join(path, STATE_FILE)}")
        steps = len(replay(statedir.fd).records)
        statedir.remove_stale_temps()
        state = store.load()
        if state is None:
            raise StateError(f"no being state exists at {os.path.join(path, STATE_FILE)}")
        store.checkpoint(state)
    finally:
        store.close()
    return Checkpointed(path, steps, state.cycle, state.status)
