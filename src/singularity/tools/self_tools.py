"""The built-in tools through which a being edits its own mind (spec §11.1-§11.5)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

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
from singularity.tools.arguments import Text
from singularity.tools.base import FunctionToolset, Outcome
from singularity.tools.typed import tool, toolset

MAX_QUERY_BYTES = 1024
MAX_RECALL = 50
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
Reviewer = Callable[[str, str], str]
"""Records a proposed self-edit (tool name, text) for an operator; returns its proposal id."""


def ascii_lower(text: str) -> str:
    """Lowercase ASCII letters only."""
    return text.translate(_ASCII_LOWER)


@dataclass(frozen=True)
class MindTools:
    """What the mind tools act on: the in-memory being (the loop saves after each call),
    its clock, and, with `--review-self-edits`, the operator's reviewer."""

    state: AgentState
    clock: Clock = system_clock
    review: Reviewer | None = None

    def self_edit(self, tool_name: str, text: str) -> Outcome:
        """Apply a self-edit, or propose it to the operator when edits are reviewed."""
        if self.review is None:
            return Outcome.success(apply_self_edit(self.state.mind, tool_name, text))
        proposal = self.review(tool_name, text)
        return Outcome.success({"pending_operator_review": True, "proposal_id": proposal})


@tool("singularity_memory_remember", "Persist a memory owned by this digital being")
async def remember(
    mind: MindTools,
    *,
    kind: Annotated[str, Text(MAX_MEMORY_KIND_BYTES)],
    text: Annotated[str, Text(MAX_MEMORY_TEXT_BYTES)],
) -> Outcome:
    memory_id = str(uuid.uuid4())
    mind.state.mind.remember(
        MemoryEntry(id=memory_id, kind=kind, text=text, created_at=now_text(mind.clock), sources=[])
    )
    return Outcome.success({"memory_id": memory_id})


@tool("singularity_memory_recall", "Recall persistent memories containing a query")
async def recall(mind: MindTools, *, query: Annotated[str, Text(MAX_QUERY_BYTES)]) -> Outcome:
    needle = ascii_lower(query)
    matches = []
    for memory in reversed(mind.state.mind.memories):
        if needle in ascii_lower(memory.kind) or needle in ascii_lower(memory.text):
            matches.append(memory.model_dump(mode="json"))
            if len(matches) == MAX_RECALL:
                break
    return Outcome.success({"memories": matches})


@tool("singularity_self_set_prompt", "Replace this being's persistent system prompt")
async def set_prompt(mind: MindTools, *, prompt: Annotated[str, Text(MAX_PROMPT_BYTES)]) -> Outcome:
    return mind.self_edit(SET_PROMPT, prompt)


@tool("singularity_self_add_rule", "Add a persistent self-imposed rule")
async def add_rule(mind: MindTools, *, rule: Annotated[str, Text(MAX_RULE_BYTES)]) -> Outcome:
    return mind.self_edit(ADD_RULE, rule)


@tool("singularity_self_add_learning", "Record a persistent learning that changes future decisions")
async def add_learning(
    mind: MindTools, *, learning: Annotated[str, Text(MAX_LEARNING_BYTES)]
) -> Outcome:
    return mind.self_edit(ADD_LEARNING, learning)


SET_PROMPT, ADD_RULE, ADD_LEARNING = set_prompt.name, add_rule.name, add_learning.name
"""The self-edits an operator may review (`--review-self-edits`)."""
MIND_TOOLS = (remember, recall, set_prompt, add_rule, add_learning)
"""The five mind tools, in catalogue order."""


def apply_self_edit(mind: Mind, tool_name: str, text: str) -> dict[str, Any]:
    """Apply one self-edit to the mind; the content its tool reports."""
    if tool_name == SET_PROMPT:
        mind.system_prompt = text
        return {"updated": True}
    if tool_name == ADD_RULE:
        mind.rules.append(text)
        return {"rule": text}
    if tool_name == ADD_LEARNING:
        mind.learnings.append(text)
        return {"learning": text}
    raise ValueError(f"not a self-edit tool: {tool_name}")


def memory_and_self_tools(
    state: AgentState, clock: Clock = system_clock, review: Reviewer | None = None
) -> FunctionToolset:
    """The five mind tools, acting on the in-memory being (the loop saves after each call).

    With `review`, a prompt replacement, rule or learning is proposed to the operator
    instead of applied; the being is told it waits for a decision.
    """
    return toolset(MindTools(state, clock, review), MIND_TOOLS)
