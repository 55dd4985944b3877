"""A readable summary of a being for `singularity show`."""

from __future__ import annotations

from typing import Any

from singularity.domain.state import AgentState
from singularity.money import render_money

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
