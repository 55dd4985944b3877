"""The system message, rebuilt from the mind before every model round (spec §6.3)."""

from __future__ import annotations

import functools

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
    (decision 29); without it the text is exactly the four sections of spec §6.3. The
    text of the same parts is built once (a full being's memories are ~300 KiB of it).
    """
    newest = mind.memories[: -PROMPT_MEMORIES - 1 : -1]
    return _text(
        mind.system_prompt,
        tuple(mind.rules),
        tuple(mind.learnings),
        steadier,
        tuple(memory.kind for memory in newest),
        tuple(memory.text for memory in newest),
    )


@functools.lru_cache(maxsize=4)
def _text(
    prompt: str,
    rules: tuple[str, ...],
    learnings: tuple[str, ...],
    steadier: str,
    kinds: tuple[str, ...],
    texts: tuple[str, ...],
) -> str:
    parts = [prompt]
    if rules:
        parts.append(RULES_HEADER + ITEM_SEPARATOR.join(rules))
    if learnings:
        parts.append(LEARNINGS_HEADER + ITEM_SEPARATOR.join(learnings))
    parts.append(steadier)
    if texts:
        parts.append(_memories(kinds, texts))
    return "".join(parts)


@functools.lru_cache(maxsize=2)
def _memories(kinds: tuple[str, ...], texts: tuple[str, ...]) -> str:
    """The memories section, shared by the texts with and without the steadier sections."""
    lines = [f"{kind}: {text}" for kind, text in zip(kinds, texts, strict=True)]
    return MEMORIES_HEADER + ITEM_SEPARATOR.join(lines)
