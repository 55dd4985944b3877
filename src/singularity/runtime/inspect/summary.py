"""A readable summary of a being for `singularity show`: the state, and metadata of its
sanctum and its private journal."""

from __future__ import annotations

from typing import Any

from singularity.config import Settings
from singularity.domain.state import AgentState
from singularity.errors import SingularityError
from singularity.money import render_money
from singularity.runtime.being import place_of
from singularity.runtime.loop.sanctum import peek_sanctum
from singularity.sanctum.extension import SanctumConfig
from singularity.sanctum.names import SanctumRefusal
from singularity.sanctum.wake import wake

NEWEST_MEMORIES = 5


def summarize(state: AgentState) -> dict[str, Any]:
    """Identity, status, budget, mind sizes, newest memories and children, as JSON-ready data."""
    budget = state.budget
    mind = state.mind
    return {
        "identity": state.identity.model_dump(),
        "status": state.status,
        "cycle": state.cycle,
        "current_model": mind.current_model,
        "budget": {
            "starting": render_money(budget.starting),
            "remaining": render_money(budget.remaining),
            "earned": render_money(budget.earned),
            "api_spent": render_money(budget.api_spent),
            "instance_spent": render_money(budget.instance_spent),
            "children_funded": render_money(budget.children_funded),
            "operator_credited": render_money(budget.operator_credited),
            "net_profit": render_money(budget.net_profit),
            "total_tokens": budget.total_tokens,
        },
        "mind": {
            "system_prompt_bytes": len(mind.system_prompt.encode("utf-8")),
            "rules": len(mind.rules),
            "learnings": len(mind.learnings),
            "memories": len(mind.memories),
            "children": len(mind.children),
        },
        "newest_memories": [
            {"kind": memory.kind, "text": memory.text, "created_at": memory.created_at}
            for memory in reversed(mind.memories[-NEWEST_MEMORIES:])
        ],
        "children": [child.model_dump() for child in mind.children],
        "conversation_messages": len(state.conversation),
        "recent_actions": [
            f"{action.tool}:{action.status}" for action in reversed(state.recent_actions[-10:])
        ],
        "started_at": state.started_at,
        "updated_at": state.updated_at,
    }


def sanctum_summary(settings: Settings) -> dict[str, Any]:
    """What the sanctum holds, in counts and names only (never a memory's body): its
    folder's, or the rows' of a being in PostgreSQL."""
    found = peek_sanctum(settings)
    if found is None:
        place = place_of(settings)
        where = place.label(settings.agent_id) if place.is_postgres else None
        return {"path": where or SanctumConfig.from_settings(settings).root, "born": False}
    store, root = found
    try:
        woken = wake(store, root, bodies=False)
    except SanctumRefusal as refusal:
        return {"path": root, "born": False, "error": refusal.message}
    finally:
        store.close()
    memory = woken.memory
    if memory is None:
        return {"path": root, "born": False, "mode": woken.mode}
    return {
        "path": root,
        "born": True,
        "mode": woken.mode,
        "memory_files": sum(count for _, count in memory.folders),
        "folders": len(memory.folders),
        "session_notes": memory.session_notes,
        "tended": memory.tended,
        "session_notes_since_tending": memory.since,
        "undistilled_raw": len(memory.undistilled),
        "pending_items": sum(1 for line in memory.pending.splitlines() if line.strip()),
        "first_breath_unfinished": [name for name, _ in woken.unfinished],
    }


def journal_summary(settings: Settings, state: AgentState) -> dict[str, Any]:
    """The private journal's metadata (never its text): counts, ages, backend, embedder."""
    from singularity.journal.extension import fingerprint_of, journal_config
    from singularity.journal.opening import KeyLost, open_journal

    config = journal_config(settings, fingerprint_of(state))
    try:
        journal = open_journal(config, create=False, recover=False)
    except KeyLost:
        return {"state": "key_lost"}
    except SingularityError as error:
        return {"state": "unreadable", "error": str(error)}
    if journal is None:
        return {"state": "none"}
    try:
        stats = journal.stats()
    except SingularityError as error:
        return {"state": "unreadable", "error": str(error)}
    finally:
        journal.close()
    keys = ("backend", "location", "entries", "promoted", "redacted", "oldest_age_hours")
    return {"state": "ok", **{key: stats[key] for key in keys}, "embedder": stats["embedder"]}
