"""The console's view of a PostgreSQL state store: every being it holds, by agent id.

Everything is read without any lease, over one autocommit connection (made again when
it breaks). A census of the store (one query) tells which beings changed since the last
look: a being is read again only when its stamp moved, and its activity journal only
past the last `seq` read, so a page that refreshes every second costs one small query
while nothing happens.

Operator requests (chat, pause, resume, stop, top-up, sanctum edits, reviews) travel
through a being's state directory (its inbox and local socket), which its runtime
records in the store (`singularity.store.postgres.places`): on this host they are handed
over there, as `say` does; otherwise (no record, another host, a missing directory)
they are refused with `OutOfReach`, and the inbox is not shown. The sanctum is read
from the store's rows (the latest version of each file); out of reach it is shown read
only.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import psycopg

from singularity.console.follower import Follower
from singularity.console.source import (
    OutOfReach,
    SanctumFile,
    UnknownBeing,
    waiting_in,
)
from singularity.domain.operator import OperatorRequest
from singularity.domain.records import ChatMessage
from singularity.domain.state import AgentState
from singularity.errors import StateError
from singularity.money import render_money
from singularity.runtime.talk.operator_client import Delivery, hand_over
from singularity.sanctum.descriptors import MAX_READ_BYTES
from singularity.sanctum.entries import SanctumEntry
from singularity.state_place import shown_url
from singularity.store.base import state_of
from singularity.store.postgres.census import Resident, census, events_after, messages_from
from singularity.store.postgres.places import NOT_RECORDED, local_dir
from singularity.store.postgres.sanctum import latest
from singularity.store.postgres.store import Connection, connect, read_snapshot

CENSUS_TTL_SECS = 0.5
MAX_DEPTH = 32
THROUGH = (
    "chat, pause, resume, stop, top-up, sanctum edits and reviews go through that "
    "directory's inbox, so this console cannot hand them to the being"
)


class PostgresSource:
    """The beings of the PostgreSQL state store at `url`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._db: Connection | None = None
        self._census: tuple[float, dict[str, Resident]] | None = None
        self._states: dict[str, tuple[str, AgentState]] = {}
        self._followers: dict[str, Follower] = {}
        self._db = self._connection()  # an unreachable store is refused at start

    @property
    def label(self) -> str:
        return f"PostgreSQL state store {shown_url(self.url)}"

    # The connection.

    def _connection(self) -> Connection:
        if self._db is None or self._db.closed or self._db.broken:
            self._db = connect(self.url)
        return self._db

    def _failed(self, error: psycopg.Error) -> StateError:
        """A read that failed: the connection is made again at the next one."""
        if self._db is not None:
            with contextlib.suppress(psycopg.Error):
                self._db.close()
        self._db = None
        return StateError(f"cannot read the state store {shown_url(self.url)}: {error}")

    # Keys.

    def _residents(self) -> dict[str, Resident]:
        now = time.monotonic()
        if self._census is None or now - self._census[0] > CENSUS_TTL_SECS:
            try:
                found = census(self._connection())
            except psycopg.Error as error:
                raise self._failed(error) from None
            self._census = (now, {resident.agent_id: resident for resident in found})
        return self._census[1]

    def _resident(self, key: str) -> Resident:
        resident = self._residents().get(key)
        if resident is None:
            raise UnknownBeing(f"no such being: {key}")
        return resident

    def _parents(self) -> dict[str, str]:
        residents = self._residents()
        return {
            child: resident.agent_id
            for resident in residents.values()
            for child in resident.children
            if child in residents and child != resident.agent_id
        }

    def keys(self) -> list[str]:
        residents, parents = self._residents(), self._parents()
        children: dict[str, list[str]] = {}
        for child, parent in parents.items():
            children.setdefault(parent, []).append(child)
        ordered: list[str] = []
        seen: set[str] = set()

        def visit(key: str) -> None:
            if key in seen:
                return
            seen.add(key)
            ordered.append(key)
            for child in children.get(key, []):
                visit(child)

        for key in residents:
            if key not in parents:
                visit(key)
        for key in residents:  # beings in a loop of parents, none of them a root
            visit(key)
        return ordered

    def parent(self, key: str) -> str | None:
        return self._parents().get(key)

    # Reading.

    def state(self, key: str) -> AgentState:
        resident = self._resident(key)
        cached = self._states.get(key)
        if cached is not None and cached[0] == resident.stamp:
            return cached[1]
        try:
            found = read_snapshot(self._connection(), key, with_events=False)
        except psycopg.Error as error:
            raise self._failed(error) from None
        if found is None:
            raise UnknownBeing(f"no such being: {key}")
        state = state_of(found.document, f"being {key} in {shown_url(self.url)}")
        self._states[key] = (resident.stamp, state)
        return state

    def alive(self, key: str) -> bool:
        return self._resident(key).alive

    def follower(self, key: str) -> Follower:
        resident = self._resident(key)
        follower = self._followers.setdefault(key, Follower())
        if resident.activity_seq < follower.offset:  # the being was removed and made again
            follower = self._followers[key] = Follower()
        if resident.activity_seq > follower.offset:
            try:
                found = events_after(self._connection(), key, follower.offset)
            except psycopg.Error as error:
                raise self._failed(error) from None
            if found:
                follower.add([event for _, event in found], found[-1][0])
        return follower

    def messages(self, key: str, start: int = 0) -> list[ChatMessage]:
        self._resident(key)
        try:
            return messages_from(self._connection(), key, start)
        except psycopg.Error as error:
            raise self._failed(error) from None

    def waiting(self, key: str) -> list[OperatorRequest]:
        state_dir, reason = self._local_dir(key)
        if state_dir is None or reason is not None:
            return []
        return waiting_in(state_dir, self.follower(key))

    def family(self, key: str) -> list[dict[str, Any]]:
        return self._family(key, 0)

    def _family(self, key: str, depth: int) -> list[dict[str, Any]]:
        if depth >= MAX_DEPTH:
            return []
        residents = self._residents()
        tree = []
        for record in self.state(key).mind.children:
            entry: dict[str, Any] = {
                "id": record.id,
                "name": record.name,
                "ticker": record.ticker,
                "state_dir": record.state_dir,
                "created_at": record.created_at,
                "status": record.status,
                "key": None,
                "alive": False,
                "children": [],
            }
            resident = residents.get(record.id)
            if resident is not None and record.id != key:
                child = self.state(record.id)
                entry.update(
                    key=record.id,
                    alive=resident.alive,
                    status=child.status,
                    cycle=child.cycle,
                    balance_usd=render_money(child.budget.remaining),
                    starting_usd=render_money(child.budget.starting),
                    children=self._family(record.id, depth + 1),
                )
            tree.append(entry)
        return tree

    def _sanctum(self, key: str) -> list[SanctumEntry]:
        """The sanctum's rows as they stand: the latest version of each file."""
        self._resident(key)
        try:
            return latest(self._connection(), key) or []
        except psycopg.Error as error:
            raise self._failed(error) from None

    def sanctum_files(self, key: str) -> list[SanctumFile]:
        return [
            SanctumFile(entry.path, len(entry.content))
            for entry in self._sanctum(key)
            if entry.content is not None
        ]

    def sanctum_text(self, key: str, path: str) -> str | None:
        for entry in self._sanctum(key):
            if entry.path == path and entry.content is not None:
                if len(entry.content) > MAX_READ_BYTES:
                    return None
                try:
                    return entry.content.decode("utf-8")
                except UnicodeDecodeError:
                    return None
        return None

    # Acting.

    def _local_dir(self, key: str) -> tuple[str | None, str | None]:
        """The being's state directory, and why requests cannot go through it (None: they
        can)."""
        self._resident(key)
        try:
            state_dir, reason = local_dir(self._connection(), key)
        except psycopg.Error as error:
            raise self._failed(error) from None
        return state_dir, (None if reason is None else f"{reason}: {THROUGH}")

    def out_of_reach(self, key: str) -> str | None:
        return self._local_dir(key)[1]

    def deliver(self, key: str, request: OperatorRequest) -> Delivery:
        state_dir, reason = self._local_dir(key)
        if state_dir is None or reason is not None:
            raise OutOfReach(reason or f"{NOT_RECORDED.format(agent=key)}: {THROUGH}")
        return hand_over(state_dir, request)
