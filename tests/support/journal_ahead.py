"""A being left with its journal ahead of its state, as `reconcile` must settle it.

This runtime makes a step's events and its state durable together, but a being-v1
directory written by another runtime that journals before it saves (spec §8: every
ledger entry is journaled before it is applied) can hold ledger entries its `state.json`
lacks. `close_with_journal_ahead` makes that directory from a live being: the events of
its step in progress reach `activity.jsonl`, its state does not.
"""

from __future__ import annotations

import os

from singularity.jsoncodec import compact_utf8
from singularity.runtime.being import LiveBeing
from singularity.storage.activity import ACTIVITY_FILE
from singularity.store import redo


def close_with_journal_ahead(being: LiveBeing) -> None:
    """Close the being, then append its unsaved events to its journal (nothing else).

    The being must stand at a checkpoint (`state.json` alone current): a boot replaying
    a redo log would cut journal lines the log does not hold.
    """
    path = being.statedir.path
    lines = b"".join(compact_utf8(event) + b"\n" for event in being.pending)
    being.close()
    with open(os.path.join(path, redo.REDO_FILE), "rb") as log:
        assert redo.scan(log.read()).records == [], "the being is not at a checkpoint"
    with open(os.path.join(path, ACTIVITY_FILE), "ab") as journal:
        journal.write(lines)
