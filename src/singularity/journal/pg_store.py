"""PostgreSQL with pgvector: table `self` in one schema per journal, HNSW with cosine.

The runtime's role creates and owns the schema and table; `REVOKE ALL … FROM PUBLIC`
leaves every other role without any privilege. Vectors of different models (and so of
different dimensions) share an untyped `vector` column; each model gets its own partial
HNSW index over `embedding::vector(N)`, and a query names its model and dimension as
literals so the planner can use that index.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
import psycopg
from pgvector import Vector as PgVector
from pgvector.psycopg import register_vector
from psycopg import sql

from singularity.journal.pg_link import Link
from singularity.journal.records import EVERYTHING, Filter, JournalError, Row, Vector
from singularity.store.postgres.connection import connect_failure, warn_unless_durable

log = logging.getLogger(__name__)
COLUMNS = (
    "id, created_at, mood, content, nonce, key_id, embedding, embedding_model, embedded_at, "
    "thread_id, seq, redacted, promoted, promoted_at, promoted_ref"
)
EF_SEARCH = 100
T = TypeVar("T")


def schema_name(journal_id: str) -> str:
    """The schema of one journal: `journal_<32 hex>`."""
    return "journal_" + uuid.UUID(journal_id).hex


def _vector(value: Any) -> Vector | None:
    if value is None:
        return None
    array = value.to_numpy() if isinstance(value, PgVector) else np.asarray(value)
    return np.ascontiguousarray(array, dtype=np.float32)


def _row(record: tuple[Any, ...]) -> Row:
    (ident, created, mood, content, nonce, key_id, vector, model, embedded, thread, seq) = record[
        :11
    ]
    redacted, promoted, promoted_at, ref = record[11:]
    return Row(
        id=str(ident),
        created_at=created,
        ciphertext=bytes(content),
        nonce=bytes(nonce),
        key_id=key_id,
        mood=mood,
        embedding=_vector(vector),
        embedding_model=model,
        embedded_at=embedded,
        thread_id=thread,
        seq=seq,
        redacted=redacted,
        promoted=promoted,
        promoted_at=promoted_at,
        promoted_ref=ref,
    )


def _where(where: Filter, ids: Sequence[str] | None = None) -> tuple[sql.Composed, list[Any]]:
    clauses: list[sql.Composable] = []
    values: list[Any] = []
    for column, operator, value in (
        ("created_at", ">=", where.since),
        ("created_at", "<", where.before),
        ("mood", "=", where.mood),
        ("thread_id", "=", where.thread_id),
        ("key_id", "=", where.key_id),
    ):
        if value is not None:
            clauses.append(sql.SQL("{} {} %s").format(sql.Identifier(column), sql.SQL(operator)))
            values.append(value)
    if where.lacking_model is not None:
        clauses.append(
            sql.SQL("NOT redacted AND (embedding_model IS NULL OR embedding_model <> %s)")
        )
        values.append(where.lacking_model)
    if ids is not None:
        clauses.append(sql.SQL("id = ANY(%s::uuid[])"))
        values.append(list(ids))
    if not clauses:
        return sql.Composed([]), values
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(clauses), values


class PostgresStore:
    """Rows in `journal_<id>.self`."""

    backend = "postgresql"

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.table = sql.Identifier(schema, "self")
        self._indexed: set[str] = set()
        self.link: Link | None = None

    @property
    def db(self) -> psycopg.Connection[Any]:
        """The current connection (it changes when the link reconnects)."""
        assert self.link is not None
        return self.link.db

    @property
    def notices(self) -> list[str]:
        """What the activity journal should say: connections lost and back."""
        return self.link.notices if self.link is not None else []

    @classmethod
    def open(cls, url: str, journal_id: str) -> PostgresStore:
        """Connect, make sure pgvector, the schema, the table and its grants exist."""
        store = cls(schema_name(journal_id))
        try:
            store.link = Link(url, store._prepare)
        except psycopg.OperationalError as error:
            raise JournalError(connect_failure("the journal database", url, error)) from None
        except psycopg.Error as error:
            raise JournalError(f"cannot prepare the journal database: {error}") from None
        return store

    def _run(self, action: Callable[[psycopg.Connection[Any]], T]) -> T:
        assert self.link is not None
        return self.link.run(action)

    def _prepare(self, db: psycopg.Connection[Any]) -> None:
        installed = db.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
        if installed is None:
            db.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(db)
        warn_unless_durable(db, "the journal database")
        schema = sql.Identifier(self.schema)
        with db.transaction():
            db.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
            db.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} ("
                    "id uuid PRIMARY KEY, created_at timestamptz NOT NULL, mood text, "
                    "content bytea NOT NULL, nonce bytea NOT NULL, key_id text NOT NULL, "
                    "embedding vector, dims integer, embedding_model text, "
                    "embedded_at timestamptz, thread_id text, seq integer, "
                    "redacted boolean NOT NULL DEFAULT false, "
                    "promoted boolean NOT NULL DEFAULT false, promoted_at timestamptz, "
                    "promoted_ref text)"
                ).format(self.table)
            )
            db.execute(
                sql.SQL("CREATE INDEX IF NOT EXISTS self_created ON {} (created_at)").format(
                    self.table
                )
            )
            db.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM PUBLIC").format(schema))
            db.execute(sql.SQL("REVOKE ALL ON TABLE {} FROM PUBLIC").format(self.table))
        db.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(EF_SEARCH)))
        try:
            # pgvector 0.8+: keep scanning the index until filtered rows fill `k`.
            db.execute("SET hnsw.iterative_scan = relaxed_order")
        except psycopg.Error:
            log.warning("pgvector before 0.8: filtered recall may return fewer than k rows")

    def _ensure_index(self, model: str, dimensions: int) -> None:
        if model in self._indexed:
            return
        name = "self_hnsw_" + hashlib.sha256(model.encode("utf-8")).hexdigest()[:16]
        query = sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw "
            "((embedding::vector({})) vector_cosine_ops) WHERE embedding_model = {}"
        ).format(sql.Identifier(name), self.table, sql.Literal(dimensions), sql.Literal(model))
        self._run(lambda db: db.execute(query))
        self._indexed.add(model)

    def insert(self, row: Row) -> None:
        """Add one row (committed on return)."""
        if row.embedding is not None and row.embedding_model is not None:
            self._ensure_index(row.embedding_model, len(row.embedding))
        # ON CONFLICT: after a lost connection the insert may be run again.
        query = sql.SQL("INSERT INTO {} ({}, dims) VALUES ({}) ON CONFLICT (id) DO NOTHING").format(
            self.table, sql.SQL(COLUMNS), sql.SQL(", ".join(["%s"] * 16))
        )
        values = (
            row.id,
            row.created_at,
            row.mood,
            row.ciphertext,
            row.nonce,
            row.key_id,
            row.embedding,
            row.embedding_model,
            row.embedded_at,
            row.thread_id,
            row.seq,
            row.redacted,
            row.promoted,
            row.promoted_at,
            row.promoted_ref,
            None if row.embedding is None else len(row.embedding),
        )
        self._run(lambda db: db.execute(query, values))

    def update(self, row: Row) -> None:
        """Write back the mutable fields."""
        if row.embedding is not None and row.embedding_model is not None:
            self._ensure_index(row.embedding_model, len(row.embedding))
        query = sql.SQL(
            "UPDATE {} SET content = %s, nonce = %s, key_id = %s, embedding = %s, dims = %s, "
            "embedding_model = %s, embedded_at = %s, promoted = %s, promoted_at = %s, "
            "promoted_ref = %s WHERE id = %s"
        ).format(self.table)
        values = (
            row.ciphertext,
            row.nonce,
            row.key_id,
            row.embedding,
            None if row.embedding is None else len(row.embedding),
            row.embedding_model,
            row.embedded_at,
            row.promoted,
            row.promoted_at,
            row.promoted_ref,
            row.id,
        )
        self._run(lambda db: db.execute(query, values))

    def rows(self, where: Filter = EVERYTHING, ids: Sequence[str] | None = None) -> list[Row]:
        """Matching rows, oldest first."""
        clause, values = _where(where, ids)
        query = sql.SQL("SELECT {} FROM {}{} ORDER BY created_at, id").format(
            sql.SQL(COLUMNS), self.table, clause
        )
        found = self._run(lambda db: db.execute(query, values).fetchall())
        return [_row(record) for record in found]

    def count(self, where: Filter = EVERYTHING) -> int:
        """How many rows match."""
        clause, values = _where(where)
        query = sql.SQL("SELECT count(*) FROM {}{}").format(self.table, clause)
        found = self._run(lambda db: db.execute(query, values).fetchone())
        return int(found[0]) if found else 0

    def nearest(self, model: str, vector: Vector, k: int, where: Filter) -> list[tuple[str, float]]:
        """Approximate top-k through the model's HNSW index, re-sorted exactly."""
        dimensions = len(vector)
        self._ensure_index(model, dimensions)
        clause, values = _where(Filter(where.since, where.before, where.mood, where.thread_id))
        distance = sql.SQL("(embedding::vector({}) <=> %s)").format(sql.Literal(dimensions))
        condition = sql.SQL("embedding_model = {} AND NOT redacted").format(sql.Literal(model))
        clause = (
            (clause + sql.SQL(" AND ") + condition) if values else sql.SQL(" WHERE ") + condition
        )
        query = sql.SQL("SELECT id, {} FROM {}{} ORDER BY {} LIMIT {}").format(
            distance, self.table, clause, distance, sql.Literal(k)
        )
        found = self._run(lambda db: db.execute(query, [vector, *values, vector]).fetchall())
        pairs = [(str(ident), 1.0 - float(dist)) for ident, dist in found]
        return sorted(pairs, key=lambda pair: -pair[1])

    def purge(self, before: datetime, keep_promoted: bool) -> int:
        """Delete old rows, then vacuum the table so dead tuples are cleaned soon."""
        condition = "created_at < %s" + (" AND NOT promoted" if keep_promoted else "")
        query = sql.SQL("DELETE FROM {} WHERE " + condition).format(self.table)
        count = self._run(lambda db: db.execute(query, (before,)).rowcount)
        if count:
            vacuum = sql.SQL("VACUUM {}").format(self.table)
            self._run(lambda db: db.execute(vacuum))
        return count

    def key_ids(self) -> set[str]:
        """Key ids still in use."""
        query = sql.SQL("SELECT DISTINCT key_id FROM {}").format(self.table)
        return {kid for (kid,) in self._run(lambda db: db.execute(query).fetchall())}

    def destroy(self) -> None:
        """Drop the journal's schema, table and indexes."""
        query = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
        self._run(lambda db: db.execute(query))
        self._indexed.clear()

    def close(self) -> None:
        """Close the connection."""
        if self.link is not None:
            self.link.close()
