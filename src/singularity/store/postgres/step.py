"""One step of a being as one call of `singularity.step` (migration `0006_step_function`).

The call's parameters are the lease the step must hold and one JSON document of the
step's parts: the being's changed columns, where each list is cut and what it appends,
and the events. Every column value is a JSON string in it (numbers too), which the
function takes as text: a JSON column keeps the exact text the runtime wrote. One
document is encoded in one call, where arrays of rows would be adapted item by item.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import generators, pq
from psycopg.types.numeric import Int8

from singularity.errors import StateError
from singularity.jsoncodec import compact
from singularity.store.postgres import rows
from singularity.store.postgres.lease import Lease

STEP = "SELECT singularity.step(%b, %b, %b, %b, %b, %b::jsonb)"
"""The call, its parameters in binary, each of a type that does not change with its
value (psycopg prepares one statement per query and parameter types)."""
KEYS = {
    "conversation": "messages",
    "recent_actions": "actions",
    "mind.rules": "rules",
    "mind.learnings": "learnings",
    "mind.memories": "memories",
    "created_resources.chat_ids": "chat_ids",
    "created_resources.message_ids": "message_ids",
}
"""The key of each list of the state in the document."""


def _text(value: Any) -> str | None:
    return value if value is None or isinstance(value, str) else str(value)


class Step:
    """The parameters of one call of `singularity.step`, gathered part by part."""

    def __init__(self, lease: Lease, *, create: bool) -> None:
        self.lease = lease
        self.create = create
        self._document: dict[str, Any] = {}

    def set_columns(self, columns: dict[str, Any]) -> None:
        """The being's columns that changed (all of them for a new being)."""
        if not columns:
            return
        values: list[str | None] = []
        for name in rows.BEING_COLUMNS:
            value = columns.get(name)
            if value is None and name in columns:
                raise StateError(f"the being's {name} is null; a state store column is never")
            values.append(_text(value))
        missing = [n for n, v in zip(rows.BEING_COLUMNS, values, strict=True) if v is None]
        if self.create and missing:
            raise StateError(f"a new being needs every column; {', '.join(missing)} missing")
        self._document["being"] = values

    def change_list(
        self,
        path: str,
        *,
        keep_from: int | None = None,
        keep_below: int | None = None,
        start: int = 0,
        items: Sequence[Any] = (),
    ) -> None:
        """Delete the list's rows numbered below `keep_from` and from `keep_below` on, then
        insert `items` (JSON values) as rows numbered from `start`."""
        table = rows.TABLES[path]
        change: dict[str, Any] = {}
        if keep_from is not None:
            change["keep_from"] = keep_from
        if keep_below is not None:
            change["keep_below"] = keep_below
        if items:
            found = [[_text(value) for value in table.to_row(item)] for item in items]
            change["start"] = start
            change["rows"] = [row[0] for row in found] if len(table.columns) == 1 else found
        if change:
            self._document[KEYS[path]] = change

    def set_archived(self, count: int) -> None:
        """The being's archived count after the step: the messages it inserts carry it (or,
        inserting none, the newest message left), not the being's row."""
        self._document.setdefault(KEYS["conversation"], {})["archived"] = count

    def set_updated_after(self, seq: int) -> None:
        """The being's row holds its `updated_at`, newer than the events up to `seq`."""
        self._document["updated_after"] = seq

    def add_events(self, first: int, events: Sequence[dict[str, Any]], updated_at: str) -> None:
        """Append the events, numbered from `first`, each stamped with the being's
        `updated_at` after the step (the being's row then need not hold it)."""
        if not events:
            return
        self._document["first_event"] = first
        self._document["updated_at"] = updated_at
        self._document["events"] = [
            [
                str(event.get("type")),
                _only_text(event.get("at")),
                _only_integer(event.get("cycle")),
                _only_text(event.get("operation_id")),
                compact(event),
            ]
            for event in events
        ]

    def parameters(self) -> tuple[Any, ...]:
        """The call's parameters, in `STEP`'s order."""
        agent, owner, epoch, seconds = self.lease.hold_arguments()
        return (agent, owner, Int8(epoch), float(seconds), self.create, compact(self._document))


def _only_text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _only_integer(value: object) -> str | None:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else None


UNKNOWN_STATEMENT = "26000"  # invalid_sql_statement_name: none prepared by that name
PREPARED = b"singularity_step"
PREPARE = (
    "PREPARE singularity_step (text, text, bigint, double precision, boolean, jsonb) "
    "AS SELECT singularity.step($1, $2, $3, $4, $5, $6)"
)
"""The step's call prepared by name, its parameters sent as text: what the call is, the
server knows once a session, and a step's values are just their bytes."""


class Call:
    """The step's call sent on its own, its answer read later: what the runtime does in
    between overlaps the server's statements and its commit's flush."""

    def __init__(self, db: psycopg.Connection[Any]) -> None:
        self.db = db
        self._prepared = False
        self._values: list[bytes] = []

    def send(self, parameters: tuple[Any, ...]) -> None:
        """Send the call of `Step.parameters()`; `wait` must follow."""
        agent, owner, epoch, seconds, create, document = parameters
        self._values = [
            agent.encode(),
            owner.encode(),
            str(int(epoch)).encode(),
            repr(float(seconds)).encode(),
            b"t" if create else b"f",
            document.encode(),
        ]
        self._send()

    def _send(self) -> None:
        db = self.db
        if not self._prepared:
            db.execute(PREPARE)
            self._prepared = True
        with db.lock:
            if db.pgconn.status != pq.ConnStatus.OK:
                raise psycopg.OperationalError("the connection is closed")
            db.pgconn.send_query_prepared(PREPARED, self._values)
            db.wait(generators.send(db.pgconn))

    def wait(self, *, again: bool = True) -> None:
        """Wait for the call's answer: a database error as psycopg raises it."""
        db = self.db
        with db.lock:
            results = db.wait(generators.fetch_many(db.pgconn))
        for result in results:
            if result.status != pq.ExecStatus.FATAL_ERROR:
                continue
            error = psycopg.errors.error_from_result(result, encoding=db.info.encoding)
            if again and error.sqlstate == UNKNOWN_STATEMENT:
                # psycopg deallocates every prepared statement of the session after a
                # rollback; the call was refused before it ran, so it is prepared again.
                self._prepared = False
                self._send()
                self.wait(again=False)
                return
            raise error
