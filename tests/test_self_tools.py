"""The five mind tools (spec §11.1-§11.5, §6.1, §6.4, §10.1).

Contract: each tool has a fixed name, description and closed object schema; every
argument is "required text" (a JSON string, trimmed, non-empty, within its UTF-8 byte
bound, no control character) or the call fails `invalid_arguments` with
`<key> is invalid`; results are exact; memories are capped at 1000 (oldest dropped);
recall is an ASCII-case-insensitive substring match on kind or text, newest first, at
most 50, and changes nothing.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from singularity.domain.records import MemoryEntry, Source
from singularity.domain.state import AgentState
from singularity.jsoncodec import compact
from singularity.tools.base import FunctionToolset, Outcome, Status
from singularity.tools.self_tools import memory_and_self_tools
from tests.support.beings import new_state

NOW = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)
NOW_TEXT = "2026-03-04T05:06:07.123Z"
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

NAMES = [
    "singularity_memory_remember",
    "singularity_memory_recall",
    "singularity_self_set_prompt",
    "singularity_self_add_rule",
    "singularity_self_add_learning",
]

# compact JSON of each definition's `wire()` form, in catalogue order.
WIRE = [
    '{"type":"function","function":{"name":"singularity_memory_remember",'
    '"description":"Persist a memory owned by this digital being",'
    '"parameters":{"type":"object","properties":{"kind":{"type":"string"},'
    '"text":{"type":"string"}},"required":["kind","text"],"additionalProperties":false}}}',
    '{"type":"function","function":{"name":"singularity_memory_recall",'
    '"description":"Recall persistent memories containing a query",'
    '"parameters":{"type":"object","properties":{"query":{"type":"string"}},'
    '"required":["query"],"additionalProperties":false}}}',
    '{"type":"function","function":{"name":"singularity_self_set_prompt",'
    '"description":"Replace this being\'s persistent system prompt",'
    '"parameters":{"type":"object","properties":{"prompt":{"type":"string"}},'
    '"required":["prompt"],"additionalProperties":false}}}',
    '{"type":"function","function":{"name":"singularity_self_add_rule",'
    '"description":"Add a persistent self-imposed rule",'
    '"parameters":{"type":"object","properties":{"rule":{"type":"string"}},'
    '"required":["rule"],"additionalProperties":false}}}',
    '{"type":"function","function":{"name":"singularity_self_add_learning",'
    '"description":"Record a persistent learning that changes future decisions",'
    '"parameters":{"type":"object","properties":{"learning":{"type":"string"}},'
    '"required":["learning"],"additionalProperties":false}}}',
]

# (tool, key, byte bound, the other required arguments)
BOUNDS: list[tuple[str, str, int, dict[str, str]]] = [
    ("singularity_memory_remember", "kind", 64, {"text": "t"}),
    ("singularity_memory_remember", "text", 16384, {"kind": "k"}),
    ("singularity_memory_recall", "query", 1024, {}),
    ("singularity_self_set_prompt", "prompt", 65536, {}),
    ("singularity_self_add_rule", "rule", 4096, {}),
    ("singularity_self_add_learning", "learning", 8192, {}),
]
BOUND_IDS = [f"{tool.split('_', 1)[1]}-{key}" for tool, key, _, _ in BOUNDS]


@pytest.fixture
def state() -> AgentState:
    return new_state()


@pytest.fixture
def tools(state: AgentState) -> FunctionToolset:
    return memory_and_self_tools(state, lambda: NOW)


def call(tools: FunctionToolset, name: str, arguments: dict[str, Any]) -> Outcome:
    return asyncio.run(tools.call(name, arguments))


def memory(index: int, kind: str = "note", text: str | None = None) -> MemoryEntry:
    return MemoryEntry(
        id=f"00000000-0000-4000-8000-{index:012d}",
        kind=kind,
        text=f"memory {index}" if text is None else text,
        created_at="2026-01-01T00:00:00Z",
        sources=[],
    )


def invalid(key: str) -> Outcome:
    return Outcome(Status.FAILED, {"message": f"{key} is invalid"}, "invalid_arguments")


# --- definitions ----------------------------------------------------------------------


def test_definitions_are_exact_and_in_catalogue_order(tools: FunctionToolset) -> None:
    definitions = tools.definitions()
    assert [definition.name for definition in definitions] == NAMES
    assert [compact(definition.wire()) for definition in definitions] == WIRE


def test_builtin_catalogue_starts_with_the_mind_tools_in_order() -> None:
    from singularity.runtime.inspect.catalogue import builtin_definitions

    definitions = builtin_definitions()
    assert [compact(definition.wire()) for definition in definitions[:5]] == WIRE


# --- results --------------------------------------------------------------------------


def test_remember_appends_a_trimmed_memory_and_returns_its_id(
    tools: FunctionToolset, state: AgentState
) -> None:
    outcome = call(tools, "singularity_memory_remember", {"kind": " idea\u3000", "text": "\tZoë "})
    assert outcome.status is Status.SUCCESS
    assert outcome.error_code is None
    assert list(outcome.content) == ["memory_id"]
    memory_id = outcome.content["memory_id"]
    assert UUID4.match(memory_id)
    assert [entry.model_dump(mode="json") for entry in state.mind.memories] == [
        {"id": memory_id, "kind": "idea", "text": "Zoë", "created_at": NOW_TEXT, "sources": []}
    ]
    second = call(tools, "singularity_memory_remember", {"kind": "k", "text": "t"})
    assert second.content["memory_id"] != memory_id
    assert [entry.id for entry in state.mind.memories] == [memory_id, second.content["memory_id"]]


def test_set_prompt_replaces_the_prompt(tools: FunctionToolset, state: AgentState) -> None:
    outcome = call(tools, "singularity_self_set_prompt", {"prompt": "  You are new.  "})
    assert outcome == Outcome(Status.SUCCESS, {"updated": True})
    assert state.mind.system_prompt == "You are new."
    assert compact(outcome.content) == '{"updated":true}'


def test_add_rule_appends_and_returns_the_stored_rule(
    tools: FunctionToolset, state: AgentState
) -> None:
    assert call(tools, "singularity_self_add_rule", {"rule": " one "}) == Outcome(
        Status.SUCCESS, {"rule": "one"}
    )
    assert call(tools, "singularity_self_add_rule", {"rule": "two"}) == Outcome(
        Status.SUCCESS, {"rule": "two"}
    )
    assert state.mind.rules == ["one", "two"]


def test_add_learning_appends_and_returns_the_stored_learning(
    tools: FunctionToolset, state: AgentState
) -> None:
    outcome = call(tools, "singularity_self_add_learning", {"learning": "\n cheap calls first\n"})
    assert outcome == Outcome(Status.SUCCESS, {"learning": "cheap calls first"})
    assert state.mind.learnings == ["cheap calls first"]


def test_extra_arguments_are_ignored(tools: FunctionToolset, state: AgentState) -> None:
    outcome = call(tools, "singularity_self_add_rule", {"rule": "r", "other": 1})
    assert outcome == Outcome(Status.SUCCESS, {"rule": "r"})


def test_recall_returns_full_entries_with_sources(
    tools: FunctionToolset, state: AgentState
) -> None:
    imported = memory(1, kind="knowledge", text="Paris is in France")
    imported.sources.append(Source(kind="notes", source_id="export-1", item_id="n-7"))
    state.mind.memories += [imported, memory(2, text="unrelated")]
    outcome = call(tools, "singularity_memory_recall", {"query": "paris"})
    assert outcome.status is Status.SUCCESS
    assert outcome.content == {
        "memories": [
            {
                "id": "00000000-0000-4000-8000-000000000001",
                "kind": "knowledge",
                "text": "Paris is in France",
                "created_at": "2026-01-01T00:00:00Z",
                "sources": [{"kind": "notes", "source_id": "export-1", "item_id": "n-7"}],
            }
        ]
    }
    assert list(outcome.content["memories"][0]) == ["id", "kind", "text", "created_at", "sources"]


def test_recall_without_matches_is_an_empty_list(tools: FunctionToolset) -> None:
    assert call(tools, "singularity_memory_recall", {"query": "x"}) == Outcome(
        Status.SUCCESS, {"memories": []}
    )


# --- errors ---------------------------------------------------------------------------

BAD_VALUES: list[Any] = [
    None,
    1,
    1.5,
    True,
    [],
    ["a"],
    {},
    "",
    " ",
    " \t\n\r\u3000\u00a0 ",
    "a\nb",
    "a\tb",
    "a\rb",
    "a\x00b",
    "a\x1bb",
    "a\x7fb",
    "a\x85b",  # NEL: white space, but also a control character inside the value
    "a\x9fb",
    "a\ud800b",  # a lone surrogate has no UTF-8 form
]


@pytest.mark.parametrize(("tool", "key", "bound", "others"), BOUNDS, ids=BOUND_IDS)
@pytest.mark.parametrize("value", BAD_VALUES, ids=repr)
def test_bad_values_are_invalid(
    tools: FunctionToolset,
    state: AgentState,
    tool: str,
    key: str,
    bound: int,
    others: dict[str, str],
    value: Any,
) -> None:
    before = state.model_dump_json()
    outcome = call(tools, tool, {**others, key: value})
    assert outcome == invalid(key)
    assert compact(outcome.content) == f'{{"message":"{key} is invalid"}}'
    assert state.model_dump_json() == before


@pytest.mark.parametrize(("tool", "key", "bound", "others"), BOUNDS, ids=BOUND_IDS)
def test_missing_key_is_invalid(
    tools: FunctionToolset,
    state: AgentState,
    tool: str,
    key: str,
    bound: int,
    others: dict[str, str],
) -> None:
    before = state.model_dump_json()
    assert call(tools, tool, dict(others)) == invalid(key)
    assert call(tools, tool, {**others, key.upper(): "x"}) == invalid(key)
    assert state.model_dump_json() == before


def test_remember_checks_kind_before_text(tools: FunctionToolset) -> None:
    assert call(tools, "singularity_memory_remember", {}) == invalid("kind")
    assert call(tools, "singularity_memory_remember", {"kind": "k"}) == invalid("text")


def _fill(bound: int, unit: str) -> str:
    """A text of exactly `bound` UTF-8 bytes made of `unit` and ASCII padding."""
    size = len(unit.encode("utf-8"))
    text = unit * (bound // size)
    return text + "a" * (bound - len(text.encode("utf-8")))


@pytest.mark.parametrize(("tool", "key", "bound", "others"), BOUNDS, ids=BOUND_IDS)
@pytest.mark.parametrize("unit", ["a", "é", "€", "😀"])
def test_byte_bounds(
    tools: FunctionToolset,
    state: AgentState,
    tool: str,
    key: str,
    bound: int,
    others: dict[str, str],
    unit: str,
) -> None:
    at_limit = _fill(bound, unit)
    assert len(at_limit.encode("utf-8")) == bound
    if unit != "a":
        assert len(at_limit) < bound  # the bound counts bytes, not characters
    outcome = call(tools, tool, {**others, key: f"  {at_limit}\n"})  # trimmed before counting
    assert outcome.status is Status.SUCCESS, outcome
    over = _fill(bound - len(unit.encode("utf-8")) + 1, "a") + unit
    assert len(over.encode("utf-8")) == bound + 1
    before = state.model_dump_json()
    assert call(tools, tool, {**others, key: over}) == invalid(key)
    assert state.model_dump_json() == before


def test_bound_stores_the_full_text(tools: FunctionToolset, state: AgentState) -> None:
    kind = "€" * 21 + "x"  # 64 bytes, 22 characters
    text = _fill(16384, "😀")
    call(tools, "singularity_memory_remember", {"kind": kind, "text": text})
    assert state.mind.memories[-1].kind == kind
    assert state.mind.memories[-1].text == text
    call(tools, "singularity_self_set_prompt", {"prompt": _fill(65536, "é")})
    assert state.mind.system_prompt == _fill(65536, "é")


def test_format_characters_are_not_control_characters(
    tools: FunctionToolset, state: AgentState
) -> None:
    outcome = call(tools, "singularity_self_add_rule", {"rule": "a\u200bb\u202ec"})
    assert outcome == Outcome(Status.SUCCESS, {"rule": "a\u200bb\u202ec"})


# --- memory cap -----------------------------------------------------------------------


def test_the_1001st_memory_drops_the_oldest(tools: FunctionToolset, state: AgentState) -> None:
    oldest = memory(0, kind="knowledge")
    oldest.sources.append(Source(kind="notes", source_id="s", item_id="i"))  # imported or not
    state.mind.memories = [oldest] + [memory(i) for i in range(1, 1000)]
    outcome = call(tools, "singularity_memory_remember", {"kind": "k", "text": "newest"})
    assert len(state.mind.memories) == 1000
    assert state.mind.memories[0].id == memory(1).id
    assert state.mind.memories[-1].id == outcome.content["memory_id"]
    assert state.mind.memories[-1].text == "newest"
    call(tools, "singularity_memory_remember", {"kind": "k", "text": "newer still"})
    assert len(state.mind.memories) == 1000
    assert state.mind.memories[0].id == memory(2).id


def test_remembering_up_to_1000_drops_nothing(tools: FunctionToolset, state: AgentState) -> None:
    state.mind.memories = [memory(i) for i in range(999)]
    call(tools, "singularity_memory_remember", {"kind": "k", "text": "the 1000th"})
    assert len(state.mind.memories) == 1000
    assert state.mind.memories[0].id == memory(0).id


# --- recall ---------------------------------------------------------------------------


def _recall_ids(tools: FunctionToolset, query: str) -> list[str]:
    outcome = call(tools, "singularity_memory_recall", {"query": query})
    assert outcome.status is Status.SUCCESS
    return [entry["id"] for entry in outcome.content["memories"]]


def test_recall_is_ascii_case_insensitive_on_kind_or_text(
    tools: FunctionToolset, state: AgentState
) -> None:
    state.mind.memories = [
        memory(0, kind="Project", text="alpha"),
        memory(1, kind="note", text="The BETA launch"),
        memory(2, kind="note", text="gamma"),
    ]
    assert _recall_ids(tools, "pROJECT") == [memory(0).id]
    assert _recall_ids(tools, "beta L") == [memory(1).id]
    assert _recall_ids(tools, "NOTE") == [memory(2).id, memory(1).id]
    assert _recall_ids(tools, "  gAmMa\t") == [memory(2).id]  # the query is trimmed
    assert _recall_ids(tools, "e") == [memory(2).id, memory(1).id, memory(0).id]


def test_recall_does_not_fold_non_ascii_case(tools: FunctionToolset, state: AgentState) -> None:
    state.mind.memories = [
        memory(0, text="ÉCOLE"),
        memory(1, text="école"),
        memory(2, text="STRASSE"),
        memory(3, text="\u212a"),  # KELVIN SIGN, whose Unicode lowercase is "k"
        memory(4, text="ΣΟΦΙΑ"),
    ]
    assert _recall_ids(tools, "école") == [memory(1).id]
    assert _recall_ids(tools, "ÉCOLE") == [memory(0).id]
    assert _recall_ids(tools, "cole") == [memory(1).id, memory(0).id]
    assert _recall_ids(tools, "straße") == []
    assert _recall_ids(tools, "k") == []
    assert _recall_ids(tools, "σοφια") == []


def test_recall_returns_at_most_50_newest_first(tools: FunctionToolset, state: AgentState) -> None:
    state.mind.memories = [
        memory(i, text=f"{'match' if i % 3 else 'other'} {i}") for i in range(200)
    ]
    matching = [memory(i).id for i in range(200) if i % 3]
    ids = _recall_ids(tools, "MATCH")
    assert ids == list(reversed(matching))[:50]


def test_recall_does_not_change_state(tools: FunctionToolset, state: AgentState) -> None:
    state.mind.memories = [memory(i) for i in range(60)]
    before = state.model_dump_json()
    outcome = call(tools, "singularity_memory_recall", {"query": "memory"})
    assert len(outcome.content["memories"]) == 50
    outcome.content["memories"][0]["text"] = "mutated by the caller"
    assert state.model_dump_json() == before
