"""The text of `singularity.step`, the server's function that writes one step of a being.

Each migration that changed it keeps its own version here, filled in from one template:
`CREATE_FUNCTION`, `HOLD_LEASE` (the fencing check), `MESSAGES` (the conversation's
rows) and what encloses the lists a step seldom changes differ between them.
"""

from __future__ import annotations

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
            extra = coalesce((b->>11)::json, extra)BEING_SET
        WHERE agent_id = p_agent;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the state store holds no being %', p_agent USING ERRCODE = 'SG002';
        END IF;
    END IF;
MESSAGES
ACTIONS
RARE_LISTS
LISTS
END_RARE_LISTS
EVENTS
END $$;
COMMENT ON FUNCTION singularity.step IS
    'one step of a being, in the transaction of the call: hold the lease (or abort), then '
    'write what p_step holds (every text as a JSON string, kept as written): "being", its '
    'columns in order, null where unchanged; per list ("messages", "actions", "rules", '
    '"learnings", "memories", "chat_ids", "message_ids") the rows it keeps (seq from '
    '"keep_from", below "keep_below") and the "rows" it appends, numbered from "start"; '
    '"events", numbered from "first_event"';
"""
"""`singularity.step`, with `CREATE_FUNCTION`, `HOLD_LEASE`, `MESSAGES`, `BEING_SET` (more
columns the update sets), `EVENTS` and the lines `RARE_LISTS` and `END_RARE_LISTS` to fill in;
`ACTIONS` and `LISTS` are the same in every version (`_list`)."""

_LIST = """    l := p_step->'{key}';
    IF l IS NOT NULL THEN
        IF l ? 'keep_from' THEN
            DELETE FROM singularity.{table} WHERE agent_id = p_agent{scope}
                AND seq < (l->>'keep_from')::bigint;
        END IF;
        IF l ? 'keep_below' THEN
            DELETE FROM singularity.{table} WHERE agent_id = p_agent{scope}
                AND seq >= (l->>'keep_below')::bigint;
        END IF;
        INSERT INTO singularity.{table}{columns}
        SELECT p_agent, {values}
        FROM {rows}(l->'rows') WITH ORDINALITY AS x (r, i);
    END IF;"""
"""How a step writes one list: the rows it no longer keeps deleted, its new rows inserted."""


def _list(
    key: str, table: str, columns: str, values: str, *, texts: bool = False, scope: str = ""
) -> str:
    """The `_LIST` block of one list; `texts`: its rows are JSON strings, not arrays."""
    rows = "jsonb_array_elements_text" if texts else "jsonb_array_elements"
    return _LIST.format(
        key=key, table=table, scope=scope, columns=columns, values=values, rows=rows
    )


_SEQ = "(l->>'start')::bigint + i - 1"
_ACTIONS = _list(
    "actions",
    "actions",
    " (agent_id, seq, cycle, tool, status, at, extra)",
    f"{_SEQ}, (r->>0)::bigint, r->>1, r->>2, r->>3,\n            (r->>4)::json",
)
_SELDOM_CHANGED = "\n".join(
    (
        _list("rules", "rules", " (agent_id, seq, text)", f"{_SEQ}, r", texts=True),
        _list("learnings", "learnings", " (agent_id, seq, text)", f"{_SEQ}, r", texts=True),
        _list(
            "memories",
            "memories",
            "\n            (agent_id, seq, id, kind, text, created_at, sources, extra)",
            f"{_SEQ}, r->>0, r->>1, r->>2, r->>3,\n            (r->>4)::json, (r->>5)::json",
        ),
        *(
            _list(
                f"{kind}_ids",
                "resources",
                " (agent_id, kind, seq, resource_id)",
                f"'{kind}', {_SEQ}, r",
                texts=True,
                scope=f" AND kind = '{kind}'",
            )
            for kind in ("chat", "message")
        ),
    )
)

_EVENTS = """    IF p_step ? 'events' THEN
        INSERT INTO singularity.activity (agent_id, seq, type, at, cycle, operation_id, line)
        SELECT p_agent, (p_step->>'first_event')::bigint + i - 1, r->>0, r->>1,
            (r->>2)::bigint, r->>3, r->>4
        FROM jsonb_array_elements(p_step->'events') WITH ORDINALITY AS x (r, i);
    END IF;"""
_MESSAGES_CUT = """    l := p_step->'messages';
    IF l IS NOT NULL THEN
        IF l ? 'keep_below' THEN
            DELETE FROM singularity.messages
                WHERE agent_id = p_agent AND seq >= (l->>'keep_below')::bigint;
        END IF;
"""
"""How every version of a step's messages begins: the rows past the kept ones deleted."""
_MESSAGES = (
    _MESSAGES_CUT
    + """        INSERT INTO singularity.messages (agent_id, seq, role, message)
        SELECT p_agent, (l->>'start')::bigint + i - 1, r->>0, (r->>1)::json
        FROM jsonb_array_elements(l->'rows') WITH ORDINALITY AS x (r, i);
    END IF;"""
)


_RARE_LISTS = (
    "    IF p_step ?| array['rules', 'learnings', 'memories', 'chat_ids', 'message_ids'] THEN\n",
    "    END IF;\n",
)
"""What encloses the lists a step seldom changes: one test, not ten expressions, on most
steps (each expression a step evaluates is set up again in every transaction)."""


def _filled(
    create: str,
    hold_lease: str,
    messages: str = _MESSAGES,
    rare: tuple[str, str] = ("", ""),
    events: str = _EVENTS,
    being_set: str = "",
) -> str:
    return (
        _STEP_TEMPLATE.replace("CREATE_FUNCTION", create)
        .replace("HOLD_LEASE", hold_lease)
        .replace("MESSAGES", messages)
        .replace("BEING_SET", being_set)
        .replace("EVENTS", events)
        .replace("ACTIONS\n", _ACTIONS + "\n")
        .replace("\nLISTS\n", "\n" + _SELDOM_CHANGED + "\n")
        .replace("END_RARE_LISTS\n", rare[1])
        .replace("RARE_LISTS\n", rare[0])
    )


STEP_FUNCTION = _filled(
    "CREATE FUNCTION", "    PERFORM singularity.hold_lease(p_agent, p_owner, p_epoch, p_seconds);"
)
"""`singularity.step` as migration `0006_step_function` made it: every write after holding
the lease (an update of its row that renews it)."""
_SHARED_LEASE = """    PERFORM 1 FROM singularity.leases
        WHERE agent_id = p_agent AND owner = p_owner AND epoch = p_epoch FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the lease of % (epoch %) is no longer held by %',
            p_agent, p_epoch, p_owner USING ERRCODE = 'SG001';
    END IF;"""
STEP_FUNCTION_SHARED_LEASE = _filled("CREATE OR REPLACE FUNCTION", _SHARED_LEASE)
"""`singularity.step` since `0007_step_shares_lease`: the lease's row is locked in share mode,
not updated (`p_seconds` is no longer read; the renewer keeps the lease's expiry)."""

_STAMPED_MESSAGES = (
    _MESSAGES_CUT
    + """        IF l ? 'rows' THEN
            INSERT INTO singularity.messages (agent_id, seq, role, message, archived)
            SELECT p_agent, (l->>'start')::bigint + i - 1, r->>0, (r->>1)::json,
                (l->>'archived')::bigint
            FROM jsonb_array_elements(l->'rows') WITH ORDINALITY AS x (r, i);
        ELSIF l ? 'archived' THEN
            UPDATE singularity.messages SET archived = (l->>'archived')::bigint
                WHERE agent_id = p_agent AND seq = (SELECT max(seq)
                    FROM singularity.messages WHERE agent_id = p_agent);
            UPDATE singularity.beings SET conversation_archived = (l->>'archived')::bigint
                WHERE agent_id = p_agent;
        END IF;
    END IF;"""
)
STEP_FUNCTION_STAMPED = _filled(
    "CREATE OR REPLACE FUNCTION", _SHARED_LEASE, _STAMPED_MESSAGES, _RARE_LISTS
)
"""`singularity.step` since `0008_archived_in_messages`: "messages" holds "archived", the
being's archived count, which stamps the rows the step inserts; a step that inserts none
stamps the newest row left, and the being's `conversation_archived` (read when no row is
stamped). The lists a step seldom changes are looked at only when the step holds one."""
_STAMPED_EVENTS = """    IF p_step ? 'events' THEN
        INSERT INTO singularity.activity
            (agent_id, seq, type, at, cycle, operation_id, line, updated_at)
        SELECT p_agent, (p_step->>'first_event')::bigint + i - 1, r->>0, r->>1,
            (r->>2)::bigint, r->>3, r->>4, p_step->>'updated_at'
        FROM jsonb_array_elements(p_step->'events') WITH ORDINALITY AS x (r, i);
    END IF;"""
_UPDATED_AFTER = """,
            updated_after = coalesce((p_step->>'updated_after')::bigint, updated_after)"""
STEP_FUNCTION_UPDATED_IN_EVENTS = _filled(
    "CREATE OR REPLACE FUNCTION",
    _SHARED_LEASE,
    _STAMPED_MESSAGES,
    _RARE_LISTS,
    _STAMPED_EVENTS,
    _UPDATED_AFTER,
)
"""`singularity.step` since `0009_updated_in_events`: the events a step inserts carry the
being's `updated_at` ("updated_at"), which a step that journals writes nowhere else; one
that journals nothing writes it to the being's row with "updated_after", the `seq` of the
newest event then (the events up to it no longer say the being's `updated_at`)."""
UNFENCED_LISTS = ("messages", "memories", "rules", "learnings", "actions", "resources", "activity")
"""The tables only `singularity.step` writes, with no foreign key since
`0008_archived_in_messages`: the step's lease check is what keeps their rows a being's."""
