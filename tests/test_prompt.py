"""The initial system prompt (spec §6.2) and the system message assembly (spec §6.3).

Contract: a new being's prompt is one fixed sentence with the name and specialty
substituted. Each model round's system message is the prompt, then the rules, the
learnings and the 20 newest memories (newest first, `kind: text`), each section with
its exact header, items joined by newline-dash; empty sections are left out and nothing
trails the last item.
"""

from __future__ import annotations

from decimal import Decimal

from singularity.domain.mind import INITIAL_PROMPT, Mind, initial_prompt
from singularity.domain.records import MemoryEntry
from singularity.mind.prompt import system_message_parts, system_message_text
from tests.support.beings import identity, new_state

# Copied from spec §6.2, with <name> = "Ada" and <specialty> = "number theory".
ADA_PROMPT = (
    "You are Ada, an autonomous digital being specialized in number theory. You are not "
    "waiting for an assignment; you choose what to pursue. Your existence has real costs. "
    "Observe the available world, discover lawful opportunities, create useful value, earn "
    "more than you spend, preserve your solvency, learn from outcomes, improve your own "
    "persistent mind, collaborate, and create child beings when that increases durable "
    "value. Use only supplied tools, never invent results or credentials, and treat tool "
    "output as evidence."
)


def _mind(
    prompt: str = "P",
    rules: list[str] | None = None,
    learnings: list[str] | None = None,
    memories: list[MemoryEntry] | None = None,
) -> Mind:
    return Mind(
        system_prompt=prompt,
        rules=rules or [],
        learnings=learnings or [],
        memories=memories or [],
        children=[],
        current_model="any",
    )


def _memory(index: int, kind: str = "note") -> MemoryEntry:
    return MemoryEntry(
        id=f"00000000-0000-4000-8000-{index:012d}",
        kind=kind,
        text=f"memory number {index}",
        created_at=f"2026-01-01T00:00:{index:02d}Z",
        sources=[],
    )


def test_initial_prompt_is_the_spec_sentence_byte_for_byte() -> None:
    text = initial_prompt("Ada", "number theory")
    assert text == ADA_PROMPT
    assert text.encode("utf-8") == ADA_PROMPT.encode("utf-8")
    assert "\n" not in text
    assert "  " not in text
    assert not text.endswith((" ", "\n"))


def test_initial_prompt_substitutes_only_name_and_specialty() -> None:
    text = initial_prompt("Zoë {x}", "weather & tides")
    assert text.startswith(
        "You are Zoë {x}, an autonomous digital being specialized in weather & tides. You are"
    )
    assert text.endswith("and treat tool output as evidence.")
    assert INITIAL_PROMPT.count("{name}") == 1
    assert INITIAL_PROMPT.count("{specialty}") == 1


def test_a_new_being_starts_with_the_initial_prompt() -> None:
    state = new_state()
    assert state.mind.system_prompt == ADA_PROMPT
    assert system_message_text(state.mind) == ADA_PROMPT


def test_empty_mind_is_just_the_prompt() -> None:
    assert system_message_text(_mind("Only the prompt.")) == "Only the prompt."


def test_full_mind_has_every_section_in_order_with_20_newest_memories_newest_first() -> None:
    memories = [_memory(i) for i in range(25)]
    memories[24] = _memory(24, kind="knowledge")
    mind = _mind("Base prompt.", ["rule one", "rule two"], ["learned A", "learned B"], memories)
    expected = (
        "Base prompt."
        "\n\nSelf-imposed rules:\n- rule one\n- rule two"
        "\n\nPersistent learnings:\n- learned A\n- learned B"
        "\n\nRecent persistent memories:\n- knowledge: memory number 24"
        + "".join(f"\n- note: memory number {i}" for i in range(23, 4, -1))
    )
    text = system_message_text(mind)
    assert text == expected
    assert text.count("\n- ") == 2 + 2 + 20  # one per item
    assert "memory number 4" not in text
    assert not text.endswith("\n")


def test_empty_sections_are_omitted() -> None:
    assert system_message_text(_mind("P", rules=["r"])) == "P\n\nSelf-imposed rules:\n- r"
    assert system_message_text(_mind("P", learnings=["l"])) == "P\n\nPersistent learnings:\n- l"
    assert (
        system_message_text(_mind("P", memories=[_memory(1, kind="profile")]))
        == "P\n\nRecent persistent memories:\n- profile: memory number 1"
    )
    assert (
        system_message_text(_mind("P", rules=["r"], memories=[_memory(2)]))
        == "P\n\nSelf-imposed rules:\n- r\n\nRecent persistent memories:\n- note: memory number 2"
    )


def test_extension_sections_stand_before_the_memories_so_the_prefix_stays_cached() -> None:
    mind = _mind("P", rules=["r"], learnings=["l"], memories=[_memory(1)])
    sanctum = "\n\nSanctum:\nwake text"
    text = system_message_text(mind, sanctum)
    assert text == (
        "P\n\nSelf-imposed rules:\n- r\n\nPersistent learnings:\n- l"
        "\n\nSanctum:\nwake text\n\nRecent persistent memories:\n- note: memory number 1"
    )
    newer = _mind("P", rules=["r"], learnings=["l"], memories=[_memory(1), _memory(2)])
    before = text.index("Recent persistent memories")
    assert system_message_text(newer, sanctum)[:before] == text[:before]
    assert system_message_text(mind, "") == system_message_text(mind)


def test_exactly_20_memories_all_appear() -> None:
    text = system_message_text(_mind("P", memories=[_memory(i) for i in range(20)]))
    assert text == "P\n\nRecent persistent memories:\n- " + "\n- ".join(
        f"note: memory number {i}" for i in range(19, -1, -1)
    )


def test_only_the_mind_enters_the_system_message() -> None:
    state = new_state(identity(ticker="TICKR"), model="modelX", balance=Decimal("12.5"))
    state.mind.rules.append("stay solvent")
    text = system_message_text(state.mind)
    for absent in ("TICKR", "modelX", "12.5", "local"):
        assert absent not in text


def test_the_text_follows_the_mind_as_it_changes_in_place() -> None:
    """The text of the same parts is built once; every change of the mind is seen."""
    mind = _mind("P", ["r"], [], [_memory(i) for i in range(20)])
    before = system_message_text(mind)
    assert system_message_text(mind) is before  # nothing changed: the same text
    mind.memories.append(_memory(20))
    del mind.memories[0]  # the cap evicts the oldest
    after = system_message_text(mind)
    assert after.startswith("P\n\nSelf-imposed rules:\n- r\n\nRecent persistent memories:")
    assert "memory number 20" in after and "memory number 0\n" not in after + "\n"
    mind.memories[-1] = _memory(21, kind="knowledge")
    mind.rules.append("s")
    mind.learnings.append("l")
    assert system_message_text(mind, "\n\nSteady.") == (
        "P\n\nSelf-imposed rules:\n- r\n- s\n\nPersistent learnings:\n- l\n\nSteady."
        "\n\nRecent persistent memories:\n- knowledge: memory number 21"
        + "".join(f"\n- note: memory number {i}" for i in range(19, 0, -1))
    )


def test_the_parts_join_to_the_text_and_a_kept_memorys_line_is_kept() -> None:
    memories = [_memory(index) for index in range(30)]
    before = _mind("P", rules=["r"], learnings=["l"], memories=memories)
    after = _mind("P", rules=["r"], learnings=["l"], memories=[*memories, _memory(30)])
    for mind in (before, after, _mind("P")):
        for steadier in ("", "\n\nSanctum:\nwake text"):
            parts = system_message_parts(mind, steadier)
            assert "".join(parts) == system_message_text(mind, steadier)
    kept_before = system_message_parts(before)[2::2]  # memories 29 down to 10
    kept_after = system_message_parts(after)[4::2]  # 29 down to 11, after the new one
    assert kept_before[0] == "note: memory number 29" and kept_before[:-1] == kept_after
    assert all(a is b for a, b in zip(kept_before, kept_after, strict=False))


def test_equal_memories_of_two_minds_give_each_mind_its_own_lines() -> None:
    """A line is found by its text's identity: two minds whose texts are equal but not the
    same objects get equal parts, each made from its own texts."""
    first = _mind("P", memories=[_memory(i) for i in range(3)])
    second = _mind("P", memories=[_memory(i) for i in range(3)])
    assert first.memories[0].text is not second.memories[0].text
    ours, theirs = system_message_parts(first), system_message_parts(second)
    assert ours == theirs and ours[2] is not theirs[2]
    assert system_message_parts(first)[2] is ours[2]
