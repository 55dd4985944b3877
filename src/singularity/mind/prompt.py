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
    return _joined(system_message_parts(mind, steadier))


def system_message_parts(mind: Mind, steadier: str = "") -> tuple[str, ...]:
    """`system_message_text` in the parts it is the concatenation of: all before the
    memories, then the memories header and each memory's line between the separators.

    A memory's line is the same string object while the memory is among the newest, so
    that what is derived from a part (its request bytes, `gateway.encoding`) is kept
    across rounds instead of derived again from the whole text.
    """
    newest = mind.memories[: -PROMPT_MEMORIES - 1 : -1]
    head = _head(mind.system_prompt, tuple(mind.rules), tuple(mind.learnings), steadier)
    kinds = tuple(memory.kind for memory in newest)
    texts = tuple(memory.text for memory in newest)
    return (head, *_memories(kinds, tuple(map(id, texts)), texts)) if texts else (head,)


@functools.lru_cache(maxsize=4)
def _joined(parts: tuple[str, ...]) -> str:
    return "".join(parts)


@functools.lru_cache(maxsize=4)
def _head(prompt: str, rules: tuple[str, ...], learnings: tuple[str, ...], steadier: str) -> str:
    parts = [prompt]
    if rules:
        parts.append(RULES_HEADER + ITEM_SEPARATOR.join(rules))
    if learnings:
        parts.append(LEARNINGS_HEADER + ITEM_SEPARATOR.join(learnings))
    parts.append(steadier)
    return "".join(parts)


@functools.lru_cache(maxsize=2)
def _memories(
    kinds: tuple[str, ...], identities: tuple[int, ...], texts: tuple[str, ...]
) -> tuple[str, ...]:
    """The memories section's parts, shared by the texts with and without the steadier
    sections (found by the texts' identities, as `_line`)."""
    parts = [MEMORIES_HEADER]
    for index, (kind, text) in enumerate(zip(kinds, texts, strict=True)):
        if index:
            parts.append(ITEM_SEPARATOR)
        parts.append(_line(kind, id(text), text))
    return tuple(parts)


@functools.lru_cache(maxsize=4 * PROMPT_MEMORIES)
def _line(kind: str, identity: int, text: str) -> str:
    """A memory's line. The text's identity is in the key (the key holds the text, so it
    cannot be reused meanwhile): a lookup finds the line of this very text, and an equal
    text of another mind in the process (a child's copy, a bench's beings) is never
    compared by value, 16 KiB at a time."""
    return f"{kind}: {text}"
