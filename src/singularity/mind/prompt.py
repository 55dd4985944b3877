"""The system message, rebuilt from the mind before every model round (spec §6.3)."""

from __future__ import annotations

from singularity.domain.mind import Mind

PROMPT_MEMORIES = 20
RULES_HEADER = "\n\nSelf-imposed rules:\n- "
LEARNINGS_HEADER = "\n\nPersistent learnings:\n- "
MEMORIES_HEADER = "\n\nRecent persistent memories:\n- "
ITEM_SEPARATOR = "\n- "


def system_message_text(mind: Mind, steadier: str = "") -> str:
    """Prompt, rules, learnings, the 20 newest memories (newest first); empty sections omitted.

    `steadier` (extension sections such as the sanctum) stands before the memories, which
    change most often, so that a model server can keep the prefix before them cached
    (decision 29); without it the text is exactly the four sections of spec §6.3.
    """
    parts = [mind.system_prompt]
    if mind.rules:
        parts.append(RULES_HEADER + ITEM_SEPARATOR.join(mind.rules))
    if mind.learnings:
        parts.append(LEARNINGS_HEADER + ITEM_SEPARATOR.join(mind.learnings))
    parts.append(steadier)
    if mind.memories:
        newest = reversed(mind.memories[-PROMPT_MEMORIES:])
        parts.append(
            MEMORIES_HEADER
            + ITEM_SEPARATOR.join(f"{memory.kind}: {memory.text}" for memory in newest)
        )
    return "".join(parts)
