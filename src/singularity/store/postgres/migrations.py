"""The state store's schema in PostgreSQL, as named migrations applied once, in order.

Each migration is written together with the row that records it in
`singularity.migrations`, and those one start applies are one transaction: a failure
leaves none of them applied nor recorded. A transaction-scoped advisory lock keeps two
runtimes starting at once from applying the same one twice. A database that records a migration this
version does not know was migrated by a newer version, and is refused.

The activity journal is append-only in the database too: a trigger refuses every
UPDATE and DELETE of `singularity.activity` (a being is removed whole only with
`singularity.removing` set in the removing transaction).
"""

from __future__ import annotations

from typing import Any

import psycopg

from singularity.errors import StateError
from singularity.store.postgres.step_function import (
    STEP_FUNCTION,
    STEP_FUNCTION_SHARED_LEASE,
    STEP_FUNCTION_STAMPED,
    STEP_FUNCTION_UPDATED_IN_EVENTS,
    UNFENCED_LISTS,
)

SCHEMA = "singularity"
LOCK_KEY = 0x5347_5354_4F52  # "SGSTOR": the advisory lock of migrations

ARCHIVED_IN_MESSAGES = (
    """
    ALTER TABLE singularity.messages ADD COLUMN archived bigint;
    COMMENT ON COLUMN singularity.messages.archived IS
        'the being''s conversation_archived as the step that wrote this row left it: the '
        'newest row''s is the being''s (NULL: the being''s own column is)';
    """
    + "".join(
        f"    ALTER TABLE singularity.{table} DROP CONSTRAINT {table}_agent_id_fkey;\n"
        for table in UNFENCED_LISTS
    )
    + """    CREATE FUNCTION singularity.remove_rows() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        -- The lease first: a step holding it is waited for, and none can follow.
        DELETE FROM singularity.leases WHERE agent_id = OLD.agent_id;
    """
    + "".join(
        f"        DELETE FROM singularity.{table} WHERE agent_id = OLD.agent_id;\n"
        for table in UNFENCED_LISTS
    )
    + """        RETURN OLD;
    END $$;
    CREATE TRIGGER beings_remove_rows AFTER DELETE ON singularity.beings
        FOR EACH ROW EXECUTE FUNCTION singularity.remove_rows();
    """
    + STEP_FUNCTION_STAMPED
)
"""Migration `0008_archived_in_messages` (`step_function.STEP_FUNCTION_STAMPED`)."""

UPDATED_IN_EVENTS = (
    """
    ALTER TABLE singularity.activity ADD COLUMN updated_at text;
    COMMENT ON COLUMN singularity.activity.updated_at IS
        'the being''s updated_at as the step that wrote this event left it: the newest '
        'event''s is the being''s, if it is newer than the being''s updated_after';
    ALTER TABLE singularity.beings ADD COLUMN updated_after bigint NOT NULL DEFAULT 0;
    COMMENT ON COLUMN singularity.beings.updated_after IS
        'the seq of the newest event when updated_at was last written here: a newer event '
        'holds the being''s updated_at (NULL there: this column is)';
    """
    + STEP_FUNCTION_UPDATED_IN_EVENTS
)
"""Migration `0009_updated_in_events` (`step_function.STEP_FUNCTION_UPDATED_IN_EVENTS`)."""

SANCTUM_APPENDS = """
    ALTER TABLE singularity.sanctum_files ADD COLUMN appended boolean NOT NULL DEFAULT false;
    COMMENT ON COLUMN singularity.sanctum_files.appended IS
        'true: content holds only the bytes appended to the path''s previous version (the '
        'file is the contents of its versions since its newest one not appended, in order)';
    """
"""Migration `0010_sanctum_appends` (`sanctum.LATEST_VERSIONS` reads it)."""

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_beings",
        """
        CREATE TABLE singularity.beings (
            agent_id text PRIMARY KEY,
            schema_version text NOT NULL,
            status text NOT NULL,
            cycle bigint NOT NULL,
            started_at text NOT NULL,
            updated_at text NOT NULL,
            identity json NOT NULL,
            budget json NOT NULL,
            system_prompt text NOT NULL,
            current_model text NOT NULL,
            conversation_archived bigint NOT NULL,
            children json NOT NULL,
            extra json NOT NULL,
            remaining numeric GENERATED ALWAYS AS ((budget->>'remaining')::numeric) STORED,
            earned numeric GENERATED ALWAYS AS ((budget->>'earned')::numeric) STORED,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE singularity.messages (
            agent_id text NOT NULL REFERENCES singularity.beings ON DELETE CASCADE,
            seq bigint NOT NULL,
            role text NOT NULL,
            message json NOT NULL,
            PRIMARY KEY (agent_id, seq)
        );
        CREATE TABLE singularity.memories (
            agent_id text NOT NULL REFERENCES singularity.beings ON DELETE CASCADE,
            seq bigint NOT NULL,
            id text NOT NULL,
            kind text NOT NULL,
            text text NOT NULL,
            created_at text NOT NULL,
            sources json NOT NULL,
            extra json,
            PRIMARY KEY (agent_id, seq)
        );
        CREATE TABLE singularity.rules (
            agent_id text NOT NULL REFERENCES singularity.beings ON DELETE CASCADE,
            seq bigint NOT NULL,
            text text NOT NULL,
            PRIMARY KEY (agent_id, seq)
        );
        CREATE TABLE singularity.learnings (
            agent_id text NOT NULL REFERENCES singularity.beings ON DELETE CASCADE,
            seq bigint NOT NULL,
            text text NOT NULL,
            PRIMARY KEY (agent_id, seq)
        );
        CREATE TABLE singularity.actions (
            agent_id text NOT NULL REFERENCES singularity.beings ON DELETE CASCADE,
            seq bigint NOT NULL,
            cycle bigint NOT NULL,
            tool text NOT NULL,
            status text NOT NULL,
            at text NOT NULL,
            extra json,
            PRIMARY KEY (agent_id, seq)
        );
        CREATE TABLE singularity.resources (
            agent_id text NOT NULL REFERENCES singularity.beings ON DELETE CASCADE,
            kind text NOT NULL,
            seq bigint NOT NULL,
            resource_id text NOT NULL,
            PRIMARY KEY (agent_id, kind, seq)
        );
        CREATE TABLE singularity.activity (
            agent_id text NOT NULL REFERENCES singularity.beings ON DELETE CASCADE,
            seq bigint NOT NULL,
            type text NOT NULL,
            at text,
            cycle bigint,
            operation_id text,
            line text NOT NULL,
            PRIMARY KEY (agent_id, seq)
        );
        CREATE INDEX activity_operation ON singularity.activity (agent_id, operation_id)
            WHERE operation_id IS NOT NULL;
        CREATE FUNCTION singularity.refuse_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' AND current_setting('singularity.removing', true) = 'on' THEN
                RETURN OLD;
            END IF;
            RAISE EXCEPTION 'singularity.activity is append-only (% refused)', TG_OP;
        END $$;
        CREATE TRIGGER activity_append_only BEFORE UPDATE OR DELETE ON singularity.activity
            FOR EACH ROW EXECUTE FUNCTION singularity.refuse_rewrite();
        CREATE TABLE singularity.leases (
            agent_id text PRIMARY KEY,
            owner text NOT NULL,
            epoch bigint NOT NULL,
            expires_at timestamptz NOT NULL
        );
        CREATE FUNCTION singularity.hold_lease(
            p_agent text, p_owner text, p_epoch bigint, p_seconds double precision
        ) RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE singularity.leases SET expires_at = now() + make_interval(secs => p_seconds)
                WHERE agent_id = p_agent AND owner = p_owner AND epoch = p_epoch;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'the lease of % (epoch %) is no longer held by %',
                    p_agent, p_epoch, p_owner USING ERRCODE = 'SG001';
            END IF;
        END $$;
        """,
    ),
    (
        "0002_sanctum_versions",
        """
        CREATE TABLE singularity.sanctum_files (
            agent_id text NOT NULL REFERENCES singularity.beings ON DELETE CASCADE,
            path text NOT NULL,
            version bigint NOT NULL,
            content bytea,
            written_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (agent_id, path, version)
        );
        COMMENT ON COLUMN singularity.sanctum_files.content IS 'NULL: removed in this version';
        """,
    ),
    (
        "0003_places",
        """
        CREATE TABLE singularity.places (
            agent_id text PRIMARY KEY,
            host text NOT NULL,
            state_dir text NOT NULL,
            recorded_at timestamptz NOT NULL DEFAULT now()
        );
        COMMENT ON TABLE singularity.places IS
            'where the runtime that last took a being keeps its state directory';
        """,
    ),
    (
        "0004_sanctum_epoch",
        """
        ALTER TABLE singularity.sanctum_files ADD COLUMN epoch bigint;
        COMMENT ON COLUMN singularity.sanctum_files.epoch IS
            'the lease epoch of the runtime that wrote this version (NULL: copied in whole)';
        """,
    ),
    (
        # No query looks events up by operation id (a being's journal is read whole, in
        # order), yet every reservation and debit paid an insertion into this index, at a
        # random place (operation ids are UUIDs), inside the step's transaction.
        "0005_no_activity_operation_index",
        "DROP INDEX IF EXISTS singularity.activity_operation",
    ),
    (
        # A step's writes as one function: the server parses and plans its statements once
        # a session (PL/pgSQL keeps their plans), not once a step.
        "0006_step_function",
        STEP_FUNCTION,
    ),
    (
        # A takeover updates the lease's row, so a share lock on it taken with the step is
        # as atomic a check as an update of it, and costs the step less: no new row
        # version to write and log. The expiry is renewed by the holder's renewer thread.
        "0007_step_shares_lease",
        STEP_FUNCTION_SHARED_LEASE,
    ),
    (
        # A full being's every step moved its window's start: an update of the being's row,
        # whose foreign-key checks then cost several times more. The archived count now
        # goes with the messages the step inserts. The lists' foreign keys cost a check
        # (and a lock of the being's row) per inserted row: the step's lease check already
        # refuses a runtime that does not hold the being, and a removal ends the lease.
        "0008_archived_in_messages",
        ARCHIVED_IN_MESSAGES,
    ),
    (
        # The runtime stamps `updated_at` at every save, so every step updated the being's
        # row for it alone (a new row version, its index entries and WAL: a third of a
        # tool call's server time). The events a step inserts anyway carry it now.
        "0009_updated_in_events",
        UPDATED_IN_EVENTS,
    ),
    (
        # An append wrote the whole file again as its new version: the runtime's day file
        # of session notes, up to 64 KiB, sent, logged and stored once for every cycle it
        # notes (the table grew with the square of the file). An append's version now
        # holds the appended bytes only.
        "0010_sanctum_appends",
        SANCTUM_APPENDS,
    ),
)
LEASE_LOST = "SG001"


def migrated(db: psycopg.Connection[Any]) -> bool:
    """Whether the store was ever migrated (one that was not holds no being)."""
    found = db.execute("SELECT to_regclass('singularity.beings')").fetchone()
    return found is not None and found[0] is not None


def applied(db: psycopg.Connection[Any]) -> list[str]:
    """The names of the migrations the database records, in the order applied."""
    rows = db.execute(
        "SELECT name FROM singularity.migrations ORDER BY applied_at, name"
    ).fetchall()
    return [str(name) for (name,) in rows]


def migrate(db: psycopg.Connection[Any]) -> list[str]:
    """Apply every migration the database lacks, in order; the names applied now."""
    known = [name for name, _ in MIGRATIONS]
    done: list[str] = []
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        db.execute("CREATE SCHEMA IF NOT EXISTS singularity")
        db.execute("REVOKE ALL ON SCHEMA singularity FROM PUBLIC")
        db.execute(
            "CREATE TABLE IF NOT EXISTS singularity.migrations ("
            "name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        recorded = applied(db)
        unknown = [name for name in recorded if name not in known]
        if unknown:
            raise StateError(
                f"the state store was migrated by a newer version (unknown migration {unknown[0]})"
            )
        for name, statements in MIGRATIONS:
            if name in recorded:
                continue
            with db.transaction():
                db.execute(statements)
                db.execute("INSERT INTO singularity.migrations (name) VALUES (%s)", (name,))
            done.append(name)
    return done
