"""The PostgreSQL backend: a being as rows, one transaction per step, fenced by a lease.

`PostgresStore.open` connects, applies the migrations, and takes the being's lease (a
second runtime is refused while it is held). A step is one call of the server's
`singularity.step` (`step.py`), one statement and one transaction in one round trip: hold
the lease (or abort), update the being's changed columns (not the window's start nor
`updated_at`, which ride on the step's messages and events), delete and insert the list
rows it changed, append the step's events. A lost connection
fails the step: its outcome is unknown to the runtime, which stops; the next boot reads
what the database committed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import set_json_loads

from singularity.domain.records import ChatMessage
from singularity.domain.state import AgentState
from singularity.errors import FatalIoError, StateError
from singularity.jsoncodec import compact
from singularity.state_place import shown_url
from singularity.store.base import Event, LeaseLost, NoBeing, state_of
from singularity.store.changes import Changes, ListChange, Tracker
from singularity.store.postgres import lease as leases
from singularity.store.postgres import rows
from singularity.store.postgres.connection import (
    connect_failure,
    open_connection,
    warn_unless_durable,
)
from singularity.store.postgres.migrations import LEASE_LOST, migrate, migrated
from singularity.store.postgres.step import STEP, Call, Step

log = logging.getLogger(__name__)
Connection = psycopg.Connection[Any]
HOLD = "SELECT singularity.hold_lease(%s, %s, %s, %s)"


def connect(url: str, lease_secs: float = leases.DEFAULT_LEASE_SECS) -> Connection:
    """An autocommit connection whose JSON columns read back as their exact text.

    A transaction left open by a frozen runtime would hold the lease's row lock and keep
    the runtime taking over waiting: the server ends such a session after the lease's time.
    """
    try:
        db = open_connection(url)
    except psycopg.Error as error:
        raise StateError(connect_failure("the state store", url, error)) from None
    timeout = max(1000, int(lease_secs * 1000))
    db.execute(f"SET idle_in_transaction_session_timeout = {timeout}")
    set_json_loads(lambda text: text if isinstance(text, str) else bytes(text).decode(), db)
    warn_unless_durable(db, "the state store")
    return db


@dataclass
class Snapshot:
    """One being as one read-only transaction saw it."""

    document: dict[str, Any]
    """The being-v1 document (the conversation window, not the archive)."""
    events: list[Event]
    activity_seq: int
    first: dict[str, int]
    """Per list, the `seq` of its first row."""
    count: dict[str, int]
    extra: dict[str, Any]


@contextlib.contextmanager
def closed_on_failure(db: Connection, failing: str) -> Iterator[Connection]:
    """Close the connection if what the block does with it fails; a database error is a
    `StateError` that says `failing`."""
    try:
        yield db
    except psycopg.Error as error:
        db.close()
        raise StateError(f"{failing}: {error}") from None
    except BaseException:
        db.close()
        raise


def read_snapshot(db: Connection, agent: str, *, with_events: bool = True) -> Snapshot | None:
    """The being `agent` in one repeatable-read transaction; None when there is none.

    Without `with_events` the activity journal is not read (`events` is empty and
    `activity_seq` 0): the console follows it by itself, from where it stopped.
    """
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    with db.transaction(), db.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        being = cursor.execute(
            f"SELECT {rows.BEING_SELECT} FROM singularity.beings b WHERE agent_id = %s",
            (agent,),
        ).fetchone()
        if being is None:
            return None
        lists: dict[str, list[Any]] = {}
        for table in rows.LISTS:
            start = being["conversation_archived"] if table.path == "conversation" else None
            condition = table.where() + (" AND seq >= %s" if start is not None else "")
            found = db.execute(
                f"SELECT seq, {', '.join(table.columns)} FROM singularity.{table.table} "
                f"WHERE {condition} ORDER BY seq",
                (*table.key(agent), *([start] if start is not None else [])),
            ).fetchall()
            lists[table.path] = [table.from_row(tuple(row[1:])) for row in found]
            first[table.path] = int(found[0][0]) if found else (start or 0)
            count[table.path] = len(found)
        events = (
            db.execute(
                "SELECT seq, line FROM singularity.activity WHERE agent_id = %s ORDER BY seq",
                (agent,),
            ).fetchall()
            if with_events
            else []
        )
    return Snapshot(
        document=rows.document(being, lists),
        events=[rows.load_json(line) for _, line in events],
        activity_seq=int(events[-1][0]) if events else 0,
        first=first,
        count=count,
        extra=rows.load_json(being["extra"]),
    )


class Batch:
    """The statements of one transaction, sent in one round trip.

    One statement alone (a new being's first step, a lease held alone) goes with its
    parameters bound by the server; the later steps are sent by `step.Call`. Several
    statements are bound on the client, by psycopg's
    quoting, and sent as one query, which PostgreSQL runs as a single transaction (an
    error in any rolls back all).
    """

    def __init__(self, db: Connection) -> None:
        self.db = db
        self._statements: list[tuple[str, Sequence[Any]]] = []

    def execute(self, query: str, parameters: Sequence[Any] = ()) -> None:
        """Add a statement."""
        self._statements.append((query, parameters))

    def run(self) -> None:
        """Send every statement at once and wait for the commit."""
        if len(self._statements) == 1:
            query, parameters = self._statements[0]
            self.db.execute(query, parameters)
            return
        with psycopg.ClientCursor(self.db) as binder:
            joined = ";\n".join(binder.mogrify(query, values) for query, values in self._statements)
        self.db.execute(joined)


class PostgresStore:
    """One being in a PostgreSQL state store."""

    def __init__(self, url: str, db: Connection, lease: leases.Lease) -> None:
        self.url = url
        self.db = db
        self._call = Call(db)
        self.lease = lease
        self.agent_id = lease.agent_id
        self.tracker = Tracker()
        self.renewer = leases.Renewer(url, lease)
        self.broken = False
        self._exists = False
        self.events_at_open: list[Event] = []
        """The activity journal as `load` found it, and what this store appended since."""
        self._activity_seq = 0
        self._first: dict[str, int] = {}
        self._count: dict[str, int] = {}
        self._extra: dict[str, Any] = {}
        self._riders: list[Callable[[Batch], None]] = []
        """Statements that go with the next step (`ride`)."""

    @classmethod
    def open(
        cls,
        url: str,
        agent_id: str,
        *,
        lease_secs: float = leases.DEFAULT_LEASE_SECS,
        create: bool = True,
    ) -> PostgresStore:
        """Connect, migrate, take the being's lease (StateLockedError while another holds it).

        Without `create` the being must be in the store already: NoBeing otherwise, and
        nothing is written (a store never migrated is left so, and no lease row is made).
        """
        label = f"being {agent_id} in {shown_url(url)}"
        db = connect(url, lease_secs)
        with closed_on_failure(db, f"cannot prepare the state store {shown_url(url)}"):
            if not create and not migrated(db):
                raise NoBeing(f"no being state exists for {label}")
            migrate(db)
            taken = leases.take(db, agent_id, lease_secs, label, existing=not create)
        return cls(url, db, taken)

    @property
    def label(self) -> str:
        return f"being {self.agent_id} in {shown_url(self.url)}"

    # Loading.

    def load(self) -> AgentState | None:
        try:
            found = self._read()
        except psycopg.Error as error:
            raise FatalIoError(f"cannot read {self.label}: {error}") from None
        if found is None:
            return None
        state = state_of(found, self.label)
        self.tracker.reset(state)
        self._exists = True
        return state

    def _read(self) -> dict[str, Any] | None:
        found = read_snapshot(self.db, self.agent_id)
        if found is None:
            return None
        self.events_at_open = found.events
        self._activity_seq = found.activity_seq
        self._first = found.first
        self._count = found.count
        self._extra = found.extra
        return found.document

    # Steps.

    def commit(self, state: AgentState, events: Sequence[Event]) -> None:
        self._commit(state, events)

    def create(
        self,
        state: AgentState,
        events: Sequence[Event],
        archived: Sequence[ChatMessage],
        also: Callable[[Batch], None] | None = None,
    ) -> None:
        """Write a being this store does not hold yet, whole, in one transaction.

        Its archive (the messages before the window) is written with it, and `also` adds
        statements of its own to the same transaction (the sanctum's rows, for instance).
        """
        if self._exists or self.tracker.started:
            raise StateError(f"{self.label} already holds a being")
        if len(archived) != state.mind.conversation_archived:
            raise StateError(
                f"the being archived {state.mind.conversation_archived} messages "
                f"but {len(archived)} were given"
            )
        self._first["conversation"] = len(archived)
        self._commit(state, events, archived=archived, also=also)

    def _commit(
        self,
        state: AgentState,
        events: Sequence[Event],
        *,
        archived: Sequence[ChatMessage] = (),
        also: Callable[[Batch], None] | None = None,
    ) -> None:
        if self.broken:
            raise FatalIoError(f"{self.label} failed earlier; it is not written again")
        if self.renewer.lost:
            self.broken = True
            raise LeaseLost(f"{self.label}: another runtime took the being over")
        changes = self.tracker.diff(state)
        if not changes and not events and not self._riders and self._exists:
            return
        try:
            step = Step(self.lease, create=not self._exists)
            extra = self._write_being(step, changes, stamped=bool(events))
            for path, change in changes.lists.items():
                self._write_list(step, path, change, archived if path == "conversation" else ())
            if archived and "conversation" not in changes.lists:
                step.change_list("conversation", items=archived)
            if archived or {"conversation", "mind.conversation_archived"} & (
                changes.lists.keys() | changes.fields.keys()
            ):
                step.set_archived(state.mind.conversation_archived)
            step.add_events(self._activity_seq + 1, events, state.updated_at)
            alone = self._exists and also is None and not self._riders
            if alone:
                self._call.send(step.parameters())
                try:
                    # Once the call is sent, the image is advanced while the server works:
                    # should the step fail, the store is broken and never reads it again.
                    self._after(state, changes)
                finally:
                    self._call.wait()
            else:
                batch = Batch(self.db)
                batch.execute(STEP, step.parameters())
                if also is not None:
                    also(batch)
                for rider in self._riders:
                    rider(batch)
                batch.run()
        except psycopg.Error as error:
            self.broken = True
            if getattr(error, "sqlstate", None) == LEASE_LOST:
                raise LeaseLost(
                    f"{self.label}: the lease was taken over by another runtime; "
                    "this runtime's step was refused"
                ) from None
            raise FatalIoError(f"cannot commit a step of {self.label}: {error}") from None
        self._exists = True
        self._extra = extra
        self._riders.clear()
        self.events_at_open.extend(events)
        self._activity_seq += len(events)
        if not alone:
            self._after(state, changes)

    def ride(self, statements: Callable[[Batch], None]) -> None:
        """Send `statements` in the next step's transaction: durable with that step, or not
        at all (the sanctum's session note rides with the step that journals it)."""
        self._riders.append(statements)

    def _write_being(self, step: Step, changes: Changes, *, stamped: bool) -> dict[str, Any]:
        """The being's changed columns (every one for a new being); the new `extra`.
        `stamped`: the step's events carry its `updated_at` (`Step.add_events`)."""
        columns: dict[str, Any] = {}
        extra = dict(self._extra)
        for path, value in changes.fields.items():
            if path == "mind.conversation_archived" and self._exists:
                continue  # the step's messages carry it (`Step.set_archived`)
            if path == "updated_at" and self._exists:
                if stamped:
                    continue
                step.set_updated_after(self._activity_seq)
            column = rows.COLUMNS.get(path)
            if column is None:
                extra[path] = value
            else:
                columns[column] = rows.column_value(column, value)
        if extra != self._extra or not self._exists:
            columns["extra"] = compact(extra)
        step.set_columns(columns)
        return extra

    def _write_list(
        self, step: Step, path: str, change: ListChange, archived: Sequence[ChatMessage]
    ) -> None:
        """Cut and append the list's rows; `archived`, the messages before a new being's
        window, go first, numbered from the being's first message."""
        first = self._first.get(path, 0) + change.dropped
        cut = bool(change.dropped) and path != "conversation"
        tail = change.kept < self._count.get(path, 0) - change.dropped
        items = [*archived, *change.added]
        step.change_list(
            path,
            keep_from=first if cut else None,
            keep_below=first + change.kept if tail else None,
            start=0 if archived else first + change.kept,
            items=items,
        )

    def _after(self, state: AgentState, changes: Changes) -> None:
        """Advance the positions of the lists and the image to the committed state."""
        for path, change in changes.lists.items():
            self._first[path] = self._first.get(path, 0) + change.dropped
            self._count[path] = change.kept + len(change.added)
        self.tracker.take(state, changes)

    def checkpoint(self, state: AgentState) -> None:
        """Rows are the state: a checkpoint is a commit of whatever is left."""
        self.commit(state, [])

    # Reading.

    def archived(self, start: int = 0, stop: int | None = None) -> list[ChatMessage]:
        found = self.db.execute(
            "SELECT m.message FROM singularity.messages m JOIN singularity.beings b "
            "USING (agent_id) WHERE agent_id = %s AND m.seq >= %s AND m.seq < "
            f"LEAST({rows.ARCHIVED}, %s) ORDER BY m.seq",
            (self.agent_id, start, stop if stop is not None else 2**62),
        ).fetchall()
        return [rows.load_json(text) for (text,) in found]

    def close(self) -> None:
        self.renewer.stop()
        if not self.renewer.lost:
            leases.release(self.db, self.lease)
        with contextlib.suppress(psycopg.Error):
            self.db.close()
