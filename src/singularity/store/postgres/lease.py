"""The fencing lease: one runtime owns a being in PostgreSQL, and only while it holds it.

A lease is a row (owner, epoch, expiry). Taking a being over is possible only once the
lease has expired, and adds one to the epoch. The holder renews it from a thread while it
lives, and every write transaction first calls `singularity.hold_lease` with the holder's
epoch, which renews it or aborts the transaction: a runtime frozen past its expiry, whose
being another runtime took over meanwhile, can write nothing when it wakes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from singularity.errors import StateLockedError
from singularity.store.base import NoBeing
from singularity.store.postgres.connection import open_connection

log = logging.getLogger(__name__)
DEFAULT_LEASE_SECS = 30.0

TAKE = """
INSERT INTO singularity.leases AS held (agent_id, owner, epoch, expires_at)
VALUES (%(agent)s, %(owner)s, 1, now() + make_interval(secs => %(seconds)s))
ON CONFLICT (agent_id) DO UPDATE
    SET owner = EXCLUDED.owner, epoch = held.epoch + 1, expires_at = EXCLUDED.expires_at
    WHERE held.expires_at <= now()
RETURNING epoch
"""
BEING = "SELECT 1 FROM singularity.beings WHERE agent_id = %s FOR KEY SHARE"
"""The being's row, kept from being removed until the lease on it is taken."""
RENEW = (
    "UPDATE singularity.leases SET expires_at = now() + make_interval(secs => %s) "
    "WHERE agent_id = %s AND owner = %s AND epoch = %s"
)
RELEASE = (
    "UPDATE singularity.leases SET expires_at = now() "
    "WHERE agent_id = %s AND owner = %s AND epoch = %s"
)


def new_owner() -> str:
    """A name for this runtime, unique and readable: `host:pid:random`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass
class Lease:
    """A lease this runtime holds on one being."""

    agent_id: str
    owner: str
    epoch: int
    seconds: float

    def hold_arguments(self) -> tuple[str, str, int, float]:
        """The arguments of `singularity.hold_lease` for this lease."""
        return (self.agent_id, self.owner, self.epoch, self.seconds)


def take(
    db: psycopg.Connection[Any], agent_id: str, seconds: float, label: str, *, existing: bool
) -> Lease:
    """Take the being's lease, or StateLockedError while another runtime holds it.

    With `existing`, only the lease of a being the store holds: NoBeing otherwise, and no
    lease row is written (a command that names a being wrongly leaves nothing behind).
    """
    owner = new_owner()
    with db.transaction():
        if existing and db.execute(BEING, (agent_id,)).fetchone() is None:
            raise NoBeing(f"no being state exists for {label}")
        row = db.execute(TAKE, {"agent": agent_id, "owner": owner, "seconds": seconds}).fetchone()
        if row is None:
            holder = db.execute(
                "SELECT owner, expires_at FROM singularity.leases WHERE agent_id = %s",
                (agent_id,),
            ).fetchone()
            held_by = f" ({holder[0]}, until {holder[1]:%Y-%m-%dT%H:%M:%SZ})" if holder else ""
            raise StateLockedError(f"another runtime owns {label}{held_by}")
    return Lease(agent_id, owner, int(row[0]), seconds)


class Renewer:
    """Renews a lease from a thread, on its own connection, every third of its time."""

    def __init__(self, url: str, lease: Lease) -> None:
        self.lease = lease
        self.lost = False
        self._url = url
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-renewer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        lease = self.lease
        db: psycopg.Connection[Any] | None = None
        try:
            while not self._stop.wait(lease.seconds / 3):
                try:
                    if db is None or db.closed or db.broken:
                        db = open_connection(self._url)
                    done = db.execute(
                        RENEW, (lease.seconds, lease.agent_id, lease.owner, lease.epoch)
                    )
                except psycopg.Error as error:
                    log.warning("could not renew the lease of %s: %s", lease.agent_id, error)
                    continue
                if done.rowcount == 0:
                    self.lost = True
                    log.error("the lease of %s was taken over by another runtime", lease.agent_id)
                    return
        finally:
            if db is not None:
                with contextlib.suppress(psycopg.Error):
                    db.close()

    def stop(self) -> None:
        """Stop renewing (the lease runs out by itself unless released)."""
        self._stop.set()
        self._thread.join()


def release(db: psycopg.Connection[Any], lease: Lease) -> None:
    """End the lease now, so that another runtime can take the being at once."""
    with contextlib.suppress(psycopg.Error):
        db.execute(RELEASE, (lease.agent_id, lease.owner, lease.epoch))


def held(db: psycopg.Connection[Any], agent_id: str) -> bool:
    """Whether a runtime holds the being's lease now (read, never taken)."""
    found = db.execute(
        "SELECT expires_at > now() FROM singularity.leases WHERE agent_id = %s", (agent_id,)
    ).fetchone()
    return bool(found and found[0])
