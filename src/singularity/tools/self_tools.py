"""The built-in tools through which a being edits its own mind (spec §11.1-§11.5)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from singularity.domain.mind import (
    MAX_LEARNING_BYTES,
    MAX_MEMORY_KIND_BYTES,
    MAX_MEMORY_TEXT_BYTES,
    MAX_PROMPT_BYTES,
    MAX_RULE_BYTES,
    Mind,
)
from singularity.domain.records import MemoryEntry
from singularity.domain.state import AgentState
from singularity.timestamps import Clock, now_text, system_clock
from singularity.tools.arguments import required_text
from singularity.tools.base import (
    FunctionTool,
    FunctionToolset,
    Outcome,
    ToolDefinition,
    object_schema,
    string_properties,
)

MAX_QUERY_BYTES = 1024
MAX_RECALL = 50
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def ascii_lower(text: str) -> str:
    """Lowercase ASCII letters only."""
    return text.translate(_ASCII_LOWER)


def _definition(name: str, description: str, *keys: str) -> ToolDefinition:
    return ToolDefinition(name, description, object_schema(string_properties(*keys)))


REMEMBER = _definition(
    "singularity_memory_remember", "Persist a memory owned by this digital being", "kind", "text"
)
RECALL = _definition(
    "singularity_memory_recall", "Recall persistent memories containing a query", "query"
)
SET_PROMPT = _definition(
    "singularity_self_set_prompt", "Replace this being's persistent system prompt", "prompt"
)
ADD_RULE = _definition("singularity_self_add_rule", "Add a persistent self-imposed rule", "rule")
ADD_LEARNING = _definition(
    "singularity_self_add_learning",
    "Record a persistent learning that changes future decisions",
    "learning",
)


# The self-edits an operator may review (`--review-self-edits`): tool, argument, bound.
SELF_EDITS = {
    SET_PROMPT.name: ("prompt", MAX_PROMPT_BYTES),
    ADD_RULE.name: ("rule", MAX_RULE_BYTES),
    ADD_LEARNING.name: ("learning", MAX_LEARNING_BYTES),
}
Reviewer = Callable[[str, str], str]
"""Records a proposed self-edit (tool name, text) for an operator; returns its proposal id."""


def apply_self_edit(mind: Mind, tool: str, text: str) -> dict[str, Any]:
    """Apply one self-edit to the mind; the content its tool reports."""
    if tool == SET_PROMPT.name:
        mind.system_prompt = text
        return {"updated": True}
    if tool == ADD_RULE.name:
        mind.rules.append(text)
        return {"rule": text}
    if tool == ADD_LEARNING.name:
        mind.learnings.append(text)
        return {"learning": text}
    raise ValueError(f"not a self-edit tool: {tool}")


def memory_and_self_tools(
    state: AgentState, clock: Clock = system_clock, review: Reviewer | None = None
) -> FunctionToolset:
    """The five mind tools, acting on the in-memory being (the loop saves after each call).

    With `review`, a prompt replacement, rule or learning is proposed to the operator
    instead of applied; the being is told it waits for a decision.
    """

    async def remember(arguments: dict[str, Any]) -> Outcome:
        kind = required_text(arguments, "kind", MAX_MEMORY_KIND_BYTES)
        text = required_text(arguments, "text", MAX_MEMORY_TEXT_BYTES)
        memory_id = str(uuid.uuid4())
        state.mind.remember(
            MemoryEntry(id=memory_id, kind=kind, text=text, created_at=now_text(clock), sources=[])
        )
        return Outcome.success({"memory_id": memory_id})

    async def recall(arguments: dict[str, Any]) -> Outcome:
        query = ascii_lower(required_text(arguments, "query", MAX_QUERY_BYTES))
        matches = []
        for memory in reversed(state.mind.memories):
            if query in ascii_lower(memory.kind) or query in ascii_lower(memory.text):
                matches.append(memory.model_dump(mode="json"))
                if len(matches) == MAX_RECALL:
                    break
        return Outcome.success({"memories": matches})

    def self_edit(tool: str) -> Callable[[dict[str, Any]], Any]:
        key, limit = SELF_EDITS[tool]

        async def edit(arguments: dict[str, Any]) -> Outcome:
            text = required_text(arguments, key, limit)
            if review is None:
                return Outcome.success(apply_self_edit(state.mind, tool, text))
            proposal = review(tool, text)
            return Outcome.success({"pending_operator_review": True, "proposal_id": proposal})

        return edit

    set_prompt, add_rule, add_learning = (
        self_edit(SET_PROMPT.name),
        self_edit(ADD_RULE.name),
        self_edit(ADD_LEARNING.name),
    )

    return FunctionToolset(
        [
            FunctionTool(REMEMBER, remember),
            FunctionTool(RECALL, recall),
            FunctionTool(SET_PROMPT, set_prompt),
            FunctionTool(ADD_RULE, add_rule),
            FunctionTool(ADD_LEARNING, add_learning),
        ]
    )
