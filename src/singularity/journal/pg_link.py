"""A PostgreSQL connection that comes back after the server went away.

Every statement of the PostgreSQL journal runs through `Link.run`. When the connection
is lost (a server restart, a network cut), the link reconnects with back-off: a few
tries within the call (0, 0.25, 0.5 and 1 s apart), and if the server is still away, it
fails fast until a wait that doubles up to a minute has passed. The statement is then
run once more on the new connection, so every statement must be safe to repeat. What
happened is kept in `notices`, for the activity journal. Each connection is opened as the
state store opens its own (`store/postgres/connection.py`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from singularity.journal.records import JournalError
from singularity.store.postgres.connection import open_connection

log = logging.getLogger(__name__)
T = TypeVar("T")
Connection = psycopg.Connection[Any]
IN_CALL_DELAYS = (0.0, 0.25, 0.5, 1.0)
MAX_WAIT_SECS = 60.0


class Unreachable(JournalError):
    """The journal database cannot be reached now."""


class Link:
    """One autocommit connection, prepared by `prepare`, reconnected when lost."""

    def __init__(
        self,
        url: str,
        prepare: Callable[[Connection], None],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Connect now (a `psycopg.Error` propagates)."""
        self.url = url
        self.prepare = prepare
        self.clock = clock
        self.sleep = sleep
        self.notices: list[str] = []
        self._lost_at: float | None = None
        self._attempts = 0
        self._wait = 0.0
        self._next_try = 0.0
        self.db = self._connect()

    def _connect(self) -> Connection:
        connection = open_connection(self.url)
        try:
            self.prepare(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def run(self, action: Callable[[Connection], T]) -> T:
        """Run `action` on the connection; reconnect and run it again if the link is lost."""
        if self._lost_at is not None:
            self._reconnect()
        try:
            return action(self.db)
        except psycopg.OperationalError as error:
            if not (self.db.broken or self.db.closed):
                raise
            self._lost(error)
        self._reconnect()
        return action(self.db)

    def _lost(self, error: BaseException) -> None:
        if self._lost_at is None:
            self._lost_at = self.clock()
            message = f"the journal database connection was lost ({type(error).__name__})"
            log.warning("%s; reconnecting", message)
            self.notices.append(f"{message}; reconnecting")

    def _reconnect(self) -> None:
        assert self._lost_at is not None
        if self.clock() < self._next_try:
            left = self._next_try - self.clock()
            raise Unreachable(f"the journal database is unreachable (next try in {left:.0f} s)")
        failure: BaseException | None = None
        for delay in IN_CALL_DELAYS:
            if delay:
                self.sleep(delay)
            self._attempts += 1
            try:
                fresh = self._connect()
            except psycopg.Error as error:
                failure = error
                continue
            with contextlib.suppress(psycopg.Error):
                self.db.close()
            self.db = fresh
            seconds = self.clock() - self._lost_at
            message = (
                f"the journal database connection is back after {self._attempts} "
                f"attempt{'s' if self._attempts != 1 else ''} ({seconds:.1f} s)"
            )
            log.warning("%s", message)
            self.notices.append(message)
            self._lost_at, self._attempts, self._wait, self._next_try = None, 0, 0.0, 0.0
            return
        self._wait = min(MAX_WAIT_SECS, max(1.0, self._wait * 2))
        self._next_try = self.clock() + self._wait
        name = type(failure).__name__ if failure is not None else "no answer"
        raise Unreachable(
            f"the journal database is unreachable ({name}); next try in {self._wait:.0f} s"
        )

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(psycopg.Error):
            self.db.close()
