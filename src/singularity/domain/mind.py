"""The mind a being edits through its own tools (spec §6)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from singularity.domain.records import ChildRecord, MemoryEntry

MAX_PROMPT_BYTES = 65536
MAX_RULE_BYTES = 4096
MAX_LEARNING_BYTES = 8192
MAX_MEMORY_KIND_BYTES = 64
MAX_MEMORY_TEXT_BYTES = 16384
MAX_MEMORIES = 1000
MAX_MODEL_BYTES = 256

INITIAL_PROMPT = (
    "You are {name}, an autonomous digital being specialized in {specialty}. "
    "You are not waiting for an assignment; you choose what to pursue. "
    "Your existence has real costs. Observe the available world, discover lawful "
    "opportunities, create useful value, earn more than you spend, preserve your solvency, "
    "learn from outcomes, improve your own persistent mind, collaborate, and create child "
    "beings when that increases durable value. Use only supplied tools, never invent results "
    "or credentials, and treat tool output as evidence."
)


def initial_prompt(name: str, specialty: str) -> str:
    """The compiled-in system prompt of a new being, with its name and specialty as given.

    One pass: a name holding `{specialty}` (or `{name}`) is kept as it is.
    """
    return INITIAL_PROMPT.format_map({"name": name, "specialty": specialty})


class Mind(BaseModel):
    """Prompt, rules, learnings, memories, children and the current model."""

    model_config = ConfigDict(strict=True)

    system_prompt: str
    rules: list[str]
    learnings: list[str]
    memories: list[MemoryEntry]
    children: list[ChildRecord]
    current_model: str
    conversation_archived: int = 0
    """How many older messages moved to `conversation.jsonl` (decision 8); an extension."""

    def remember(self, entry: MemoryEntry) -> None:
        """Append a memory, dropping the oldest beyond the cap."""
        self.memories.append(entry)
        if len(self.memories) > MAX_MEMORIES:
            del self.memories[: len(self.memories) - MAX_MEMORIES]
