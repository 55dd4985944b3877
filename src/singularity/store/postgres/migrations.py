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

SCHEMA = "singularity"
LOCK_KEY = 0x5347_5354_4F52  # "SGSTOR": the advisory lock of migrations

_STEP_TEMPLATE = """
CREATE_FUNCTION singularity.step(
    p_agent text, p_owner text, p_epoch bigint, p_seconds double precision,
    p_create boolean, p_step jsonb
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    b jsonb := p_step->'being';
    l jsonb;
BEGIN
HOLD_LEASE
    IF p_create THEN
        INSERT INTO singularity.beings (agent_id, schema_version, status, cycle, started_at,
            updated_at, identity, budget, system_prompt, current_model,
            conversation_archived, children, extra)
        VALUES (p_agent, b->>0, b->>1, (b->>2)::bigint, b->>3, b->>4, (b->>5)::json,
            (b->>6)::json, b->>7, b->>8, (b->>9)::bigint, (b->>10)::json, (b->>11)::json);
    ELSIF b IS NOT NULL THEN
        UPDATE singularity.beings SET
            schema_version = coalesce(b->>0, schema_version),
            status = coalesce(b->>1, status),
            cycle = coalesce((b->>2)::bigint, cycle),
            started_at = coalesce(b->>3, started_at),
            updated_at = coalesce(b->>4, updated_at),
            identity = coalesce((b->>5)::json, identity),
            budget = coalesce((b->>6)::json, budget),
            system_prompt = coalesce(b->>7, system_prompt),
            current_model = coalesce(b->>8, current_model),
            conversation_archived = coalesce((b->>9)::bigint, conversation_archived),
            children = coalesce((b->>10)::json, children),
            extra = coalesce((b->>11)::json, extra)
        WHERE agent_id = p_agent;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the state store holds no being %', p_agent USING ERRCODE = 'SG002';
        END IF;
    END IF;
    l := p_step->'messages';
    IF l IS NOT NULL THEN
        IF l ? 'keep_below' THEN
            DELETE FROM singularity.messages
                WHERE agent_id = p_agent AND seq >= (l->>'keep_below')::bigint;
        END IF;
        INSERT INTO singularity.messages (agent_id, seq, role, message)
        SELECT p_agent, (l->>'start')::bigint + i - 1, r->>0, (r->>1)::json
        FROM jsonb_array_elements(l->'rows') WITH ORDINALITY AS x (r, i);
    END IF;
    l := p_step->'actions';
    IF l IS NOT NULL THEN
        IF l ? 'keep_from' THEN
            DELETE FROM singularity.actions WHERE agent_id = p_agent
                AND seq < (l->>'keep_from')::bigint;
        END IF;
        IF l ? 'keep_below' THEN
            DELETE FROM singularity.actions WHERE agent_id = p_agent
                AND seq >= (l->>'keep_below')::bigint;
        END IF;
        INSERT INTO singularity.actions (agent_id, seq, cycle, tool, status, at, extra)
        SELECT p_agent, (l->>'start')::bigint + i - 1, (r->>0)::bigint, r->>1, r->>2, r->>3,
            (r->>4)::json
        FROM jsonb_array_elements(l->'rows') WITH ORDINALITY AS x (r, i);
    END IF;
    l := p_step->'rules';
    IF l IS NOT NULL THEN
        IF l ? 'keep_from' THEN
            DELETE FROM singularity.rules WHERE agent_id = p_agent
                AND seq < (l->>'keep_from')::bigint;
        END IF;
        IF l ? 'keep_below' THEN
            DELETE FROM singularity.rules WHERE agent_id = p_agent
                AND seq >= (l->>'keep_below')::bigint;
        END IF;
        INSERT INTO singularity.rules (agent_id, seq, text)
        SELECT p_agent, (l->>'start')::bigint + i - 1, r
        FROM jsonb_array_elements_text(l->'rows') WITH ORDINALITY AS x (r, i);
    END IF;
    l := p_step->'learnings';
    IF l IS NOT NULL THEN
        IF l ? 'keep_from' THEN
            DELETE FROM singularity.learnings WHERE agent_id = p_agent
                AND seq < (l->>'keep_from')::bigint;
        END IF;
        IF l ? 'keep_below' THEN
            DELETE FROM singularity.learnings WHERE agent_id = p_agent
                AND seq >= (l->>'keep_below')::bigint;
        END IF;
        INSERT INTO singularity.learnings (agent_id, seq, text)
        SELECT p_agent, (l->>'start')::bigint + i - 1, r
        FROM jsonb_array_elements_text(l->'rows') WITH ORDINALITY AS x (r, i);
    END IF;
    l := p_step->'memories';
    IF l IS NOT NULL THEN
        IF l ? 'keep_from' THEN
            DELETE FROM singularity.memories WHERE agent_id = p_agent
                AND seq < (l->>'keep_from')::bigint;
        END IF;
        IF l ? 'keep_below' THEN
            DELETE FROM singularity.memories WHERE agent_id = p_agent
                AND seq >= (l->>'keep_below')::bigint;
        END IF;
        INSERT INTO singularity.memories
            (agent_id, seq, id, kind, text, created_at, sources, extra)
        SELECT p_agent, (l->>'start')::bigint + i - 1, r->>0, r->>1, r->>2, r->>3,
            (r->>4)::json, (r->>5)::json
        FROM jsonb_array_elements(l->'rows') WITH ORDINALITY AS x (r, i);
    END IF;
    l := p_step->'chat_ids';
    IF l IS NOT NULL THEN
        IF l ? 'keep_from' THEN
            DELETE FROM singularity.resources WHERE agent_id = p_agent AND kind = 'chat'
                AND seq < (l->>'keep_from')::bigint;
        END IF;
        IF l ? 'keep_below' THEN
            DELETE FROM singularity.resources WHERE agent_id = p_agent AND kind = 'chat'
                AND seq >= (l->>'keep_below')::bigint;
        END IF;
        INSERT INTO singularity.resources (agent_id, kind, seq, resource_id)
        SELECT p_agent, 'chat', (l->>'start')::bigint + i - 1, r
        FROM jsonb_array_elements_text(l->'rows') WITH ORDINALITY AS x (r, i);
    END IF;
    l := p_step->'message_ids';
    IF l IS NOT NULL THEN
        IF l ? 'keep_from' THEN
            DELETE FROM singularity.resources WHERE agent_id = p_agent AND kind = 'message'
                AND seq < (l->>'keep_from')::bigint;
        END IF;
        IF l ? 'keep_below' THEN
            DELETE FROM singularity.resources WHERE agent_id = p_agent AND kind = 'message'
                AND seq >= (l->>'keep_below')::bigint;
        END IF;
        INSERT INTO singularity.resources (agent_id, kind, seq, resource_id)
        SELECT p_agent, 'message', (l->>'start')::bigint + i - 1, r
        FROM jsonb_array_elements_text(l->'rows') WITH ORDINALITY AS x (r, i);
    END IF;
    IF p_step ? 'events' THEN
        INSERT INTO singularity.activity (agent_id, seq, type, at, cycle, operation_id, line)
        SELECT p_agent, (p_step->>'first_event')::bigint + i - 1, r->>0, r->>1,
            (r->>2)::bigint, r->>3, r->>4
        FROM jsonb_array_elements(p_step->'events') WITH ORDINALITY AS x (r, i);
    END IF;
END $$;
COMMENT ON FUNCTION singularity.step IS
    'one step of a being, in the transaction of the call: hold the lease (or abort), then '
    'write what p_step holds (every text as a JSON string, kept as written): "being", its '
    'columns in order, null where unchanged; per list ("messages", "actions", "rules", '
    '"learnings", "memories", "chat_ids", "message_ids") the rows it keeps (seq from '
    '"keep_from", below "keep_below") and the "rows" it appends, numbered from "start"; '
    '"events", numbered from "first_event"';
"""
"""`singularity.step`, with `CREATE_FUNCTION` and `HOLD_LEASE` to fill in."""
STEP_FUNCTION = _STEP_TEMPLATE.replace("CREATE_FUNCTION", "CREATE FUNCTION").replace(
    "HOLD_LEASE", "    PERFORM singularity.hold_lease(p_agent, p_owner, p_epoch, p_seconds);"
)
"""`singularity.step` as migration `0006_step_function` made it: every write after holding
the lease (an update of its row that renews it)."""
STEP_FUNCTION_SHARED_LEASE = _STEP_TEMPLATE.replace(
    "CREATE_FUNCTION", "CREATE OR REPLACE FUNCTION"
).replace(
    "HOLD_LEASE",
    """    PERFORM 1 FROM singularity.leases
        WHERE agent_id = p_agent AND owner = p_owner AND epoch = p_epoch FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the lease of % (epoch %) is no longer held by %',
            p_agent, p_epoch, p_owner USING ERRCODE = 'SG001';
    END IF;""",
)
"""`singularity.step` since `0007_step_shares_lease`: the lease's row is locked in share mode,
not updated (`p_seconds` is no longer read; the renewer keeps the lease's expiry)."""

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
