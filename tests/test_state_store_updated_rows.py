"""`updated_at` in PostgreSQL: it rides with the step's events, not the being's row.

Every save stamps `updated_at`: a step that journals (a tool call) writes no row of
`singularity.beings` for it, and one that journals nothing writes it there; either way
the being reads back as written (to a reader and to a runtime resuming it), and the
census stamp moves with each step.
"""

from __future__ import annotations

from pathlib import Path

from singularity.store.postgres.census import census
from singularity.store.postgres.reader import peek_being
from singularity.store.postgres.store import connect
from tests.support.stores import AT, a_being, a_started_being, new_place, open_store, store_url

BEING_ROW = "SELECT xmin::text, updated_at FROM singularity.beings WHERE agent_id = %s"


def test_a_journaled_steps_updated_at_writes_no_row_of_the_being(tmp_path: Path) -> None:
    with (
        a_started_being("postgresql", tmp_path) as (agent, store, state),
        connect(store_url()) as db,
    ):
        before = db.execute(BEING_ROW, (agent,)).fetchone()
        for index in range(4):
            state.updated_at = f"2026-01-01T00:00:0{index + 1}Z"
            state.conversation.append({"role": "tool", "content": f"r{index}"})
            store.commit(state, [{"type": "tool_finished", "at": state.updated_at}])
            (seen,) = [r for r in census(db) if r.agent_id == agent]
            assert seen.stamp.endswith(f":{state.updated_at}:{index + 2}")
        assert db.execute(BEING_ROW, (agent,)).fetchone() == before
    reads_back(agent, state.to_json())


def test_updated_at_reads_back_whichever_step_wrote_it_last(tmp_path: Path) -> None:
    agent = new_place("postgresql", tmp_path)
    state = a_being(agent)
    steps = [
        ("2026-01-01T00:00:01Z", True),
        ("2026-01-01T00:00:02Z", False),  # journals nothing: the being's row holds it
        ("2026-01-01T00:00:02Z", True),  # unchanged, journaled
        ("2026-01-01T00:00:03Z", True),
        ("2026-01-01T00:00:04Z", False),
        ("2026-01-01T00:00:04Z", False),  # nothing changed at all
        ("2025-12-31T23:59:59Z", True),  # a clock set back: the newest step's, not the latest
    ]
    store = open_store("postgresql", agent)
    try:
        store.load()
        store.commit(state, [{"type": "started", "at": AT}])
        for index, (updated_at, journaled) in enumerate(steps):
            state.updated_at = updated_at
            state.mind.rules.append(f"rule {index}")
            store.commit(state, [{"type": "warned", "at": AT}] if journaled else [])
            reads_back(agent, state.to_json(), held=True)
    finally:
        store.close()
    reads_back(agent, state.to_json())


def reads_back(agent: str, expected: bytes, *, held: bool = False) -> None:
    """The being as a reader (`show`) sees it and, once no runtime holds it, as a runtime
    resuming it does."""
    url = store_url()
    peeked = peek_being(url, agent)
    assert peeked is not None and peeked.state.to_json() == expected
    if held:
        return
    reopened = open_store("postgresql", agent)
    try:
        loaded = reopened.load()
        assert loaded is not None and loaded.to_json() == expected
    finally:
        reopened.close()
