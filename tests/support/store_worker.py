"""A process that lives steps on a state store until it is killed (the store crash tests).

    python -m tests.support.store_worker BACKEND PLACE URL LEASE_SECS [CHECKPOINT_BYTES]

It opens the being at PLACE (waiting while a killed predecessor's lease runs out), creates
it if there is none, then commits steps forever: each step is one remembering tool call
(`tests.support.stores.live_a_step`) and, every fifth step, an archive of the window.
After each commit returns it prints `ack <step> <memory id>`: what a crash must not lose.
"""

from __future__ import annotations

import os
import sys
import time

from singularity.errors import StateLockedError
from singularity.store.base import StateStore
from singularity.store.directory import DirectoryStore
from tests.support.stores import a_being, archive_overflow, live_a_step

WAIT_SECS = 180.0


def _say(line: str) -> None:
    """One line in one write: a kill can never leave half of it."""
    os.write(sys.stdout.fileno(), f"{line}\n".encode())


def _open(backend: str, place: str, url: str, lease_secs: float, checkpoint: int) -> StateStore:
    if backend == "directory":
        return DirectoryStore.open(place, checkpoint_bytes=checkpoint)
    from singularity.store.postgres.store import PostgresStore

    deadline = time.monotonic() + WAIT_SECS
    while True:
        try:
            return PostgresStore.open(url, place, lease_secs=lease_secs)
        except StateLockedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(lease_secs / 4)  # polling for the killed runtime's lease to run out


def main(argv: list[str]) -> int:
    backend, place, url, lease = argv[0], argv[1], argv[2], float(argv[3])
    checkpoint = int(argv[4]) if len(argv) > 4 else 1 << 20
    store = _open(backend, place, url, lease, checkpoint)
    state = store.load()
    if state is None:
        state = a_being()
        store.commit(state, [{"type": "started", "at": state.started_at}])
    _say("ready")
    while True:
        state.cycle += 1
        events = live_a_step(state, state.cycle, memory_bytes=512)
        if state.cycle % 5 == 0:
            archive_overflow(state, keep=4)
        store.commit(state, events)
        _say(f"ack {state.cycle} {state.mind.memories[-1].id}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
