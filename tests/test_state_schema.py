"""`state.json` schema `being-v1` (spec §5.3, §5.4, §2 money and JSON conventions).

Contract: pretty JSON with a two-space indent, fields in the spec's order, money as
plain decimal strings, non-ASCII not escaped; unknown top-level or identity fields make
the state unparsable (JSON class, exit 5); unknown fields in other nested records are
ignored; another `schema_version` is `state: unsupported state schema <v>` (exit 4).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from singularity.domain.identity import Identity
from singularity.domain.state import AgentState, parse_state
from singularity.errors import JsonFailure, StateError

FIXTURES = Path(__file__).parent / "fixtures" / "state"
NEW_BEING = (FIXTURES / "new-being.json").read_bytes()
RICH_BEING = (FIXTURES / "rich-being.json").read_bytes()

TOP_LEVEL_ORDER = [
    "schema_version",
    "identity",
    "mind",
    "status",
    "cycle",
    "budget",
    "conversation",
    "recent_actions",
    "created_resources",
    "started_at",
    "updated_at",
]
IDENTITY_ORDER = [
    "agent_id",
    "name",
    "ticker",
    "agent_type",
    "specialty",
    "role",
    "environment",
    "host",
    "workload_id",
    "workload_public_key",
    "executable_digest",
    "code_digest",
    "policy_digest",
    "policy_sequence",
]
MIND_ORDER = ["system_prompt", "rules", "learnings", "memories", "children", "current_model"]
BUDGET_ORDER = ["starting", "remaining", "api_spent", "instance_spent", "total_tokens", "earned"]


def _golden_identity() -> Identity:
    return Identity(
        agent_id="being-7",
        name="Zo\u00eb",
        ticker="ZOE",
        agent_type="artist",
        specialty="\u0142\u00f3d\u017a weaving",
        role="being",
        environment="local",
        host="host.example:1",
        workload_id="w-1",
        workload_public_key="a" * 64,
        executable_digest="b" * 64,
        code_digest="c" * 64,
        policy_digest="d" * 64,
        policy_sequence=3,
    )


def _doc(data: bytes = RICH_BEING) -> dict[str, Any]:
    document = json.loads(data)
    assert isinstance(document, dict)
    return document


def _bytes(document: dict[str, Any]) -> bytes:
    return json.dumps(document, ensure_ascii=False).encode("utf-8")


def _json_failure(data: bytes) -> JsonFailure:
    with pytest.raises(JsonFailure) as caught:
        parse_state(data)
    assert caught.value.exit_code == 5
    return caught.value


# --- the golden file -------------------------------------------------------------------


def test_new_being_matches_the_golden_file_byte_for_byte() -> None:
    state = AgentState.new(_golden_identity(), "any", Decimal("10"), "2026-01-02T03:04:05.123Z")
    assert state.to_json() == NEW_BEING


def test_golden_file_is_pretty_json_in_the_spec_field_order() -> None:
    text = NEW_BEING.decode("utf-8")
    assert "Zo\u00eb" in text and "\\u" not in text  # non-ASCII is not escaped
    assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    document = json.loads(text)
    assert list(document) == TOP_LEVEL_ORDER
    assert list(document["identity"]) == IDENTITY_ORDER
    assert list(document["mind"])[: len(MIND_ORDER)] == MIND_ORDER
    assert list(document["budget"])[: len(BUDGET_ORDER)] == BUDGET_ORDER
    assert document["budget"]["starting"] == "10"
    assert document["budget"]["api_spent"] == "0"
    assert isinstance(document["identity"]["policy_sequence"], int)


def test_initial_prompt_has_name_and_specialty_substituted() -> None:
    prompt = parse_state(NEW_BEING).mind.system_prompt
    assert prompt.startswith(
        "You are Zo\u00eb, an autonomous digital being specialized in \u0142\u00f3d\u017a weaving. "
    )
    assert prompt.endswith("treat tool output as evidence.")
    assert "\n" not in prompt and "  " not in prompt


@pytest.mark.parametrize("data", [NEW_BEING, RICH_BEING], ids=["new", "rich"])
def test_parse_then_serialize_is_identical(data: bytes) -> None:
    assert parse_state(data).to_json() == data


def test_rich_state_is_pretty_json_of_itself() -> None:
    text = RICH_BEING.decode("utf-8")
    assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False)


def test_absent_optional_message_fields_are_omitted() -> None:
    state = parse_state(RICH_BEING)
    assert state.conversation[0] == {"role": "system", "content": "framing"}
    out = json.loads(state.to_json())
    assert list(out["conversation"][1]) == ["role", "content"]
    assert out["conversation"][2]["content"] is None  # present as null when it was null
    assert list(out["conversation"][3]) == ["role", "content", "tool_call_id", "name"]


# --- unknown and missing fields ---------------------------------------------------------


def test_unknown_top_level_field_is_refused() -> None:
    document = _doc()
    document["extra"] = 1
    assert "extra" in str(_json_failure(_bytes(document)))


def test_unknown_identity_field_is_refused() -> None:
    document = _doc()
    document["identity"]["nickname"] = "x"
    assert "nickname" in str(_json_failure(_bytes(document)))


@pytest.mark.parametrize(
    "path",
    [
        ("mind",),
        ("budget",),
        ("mind", "memories", 0),
        ("mind", "children", 0),
        ("recent_actions", 0),
        ("created_resources",),
        ("conversation", 1),
        ("conversation", 2, "tool_calls", 0),
        ("conversation", 2, "tool_calls", 0, "function"),
    ],
)
def test_unknown_nested_field_is_tolerated_and_dropped(path: tuple[str | int, ...]) -> None:
    document = _doc()
    target: Any = document
    for key in path:
        target = target[key]
    target["from_a_newer_writer"] = {"anything": [1, 2]}
    state = parse_state(_bytes(document))
    assert state.to_json() == RICH_BEING


def test_memory_without_sources_loads_as_empty_list() -> None:
    document = _doc()
    del document["mind"]["memories"][0]["sources"]
    state = parse_state(_bytes(document))
    assert state.mind.memories[0].sources == []
    assert state.to_json() == RICH_BEING  # written back with "sources": []


def test_source_triple_with_unknown_field_is_refused() -> None:
    document = _doc()
    document["mind"]["memories"][1]["sources"][0]["extra"] = "x"
    _json_failure(_bytes(document))


def test_source_triple_missing_a_field_is_refused() -> None:
    document = _doc()
    del document["mind"]["memories"][1]["sources"][0]["item_id"]
    _json_failure(_bytes(document))


@pytest.mark.parametrize(
    "path",
    [
        ("identity", "agent_id"),
        ("mind", "current_model"),
        ("mind", "memories", 0, "text"),
        ("budget", "remaining"),
        ("recent_actions", 0, "status"),
        ("cycle",),
        ("updated_at",),
    ],
)
def test_missing_required_field_is_refused(path: tuple[str | int, ...]) -> None:
    document = _doc()
    target: Any = document
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    _json_failure(_bytes(document))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("status",), "dreaming"),
        (("cycle",), "12"),
        (("identity", "policy_sequence"), True),
        (("identity", "policy_sequence"), -1),
        (("identity", "policy_sequence"), 2**64),
        (("recent_actions", 0, "status"), "ok"),
        (("started_at",), "yesterday"),
        (("budget", "remaining"), True),
        (("budget", "remaining"), "ten"),
        (("budget", "remaining"), "NaN"),
        (("budget", "remaining"), None),
        (("conversation", 1, "role"), "robot"),
        (("conversation", 3, "tool_call_id"), 7),
        (("conversation", 2, "tool_calls", 0, "function", "arguments"), {"a": 1}),
        (("mind", "memories", 0, "created_at"), "2026-01-02 03:04:05"),
    ],
)
def test_wrong_values_are_refused(path: tuple[str | int, ...], value: object) -> None:
    document = _doc()
    target: Any = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    _json_failure(_bytes(document))


def test_failed_status_exists_in_the_schema() -> None:
    document = _doc()
    document["status"] = "failed"
    assert parse_state(_bytes(document)).status == "failed"


# --- money -----------------------------------------------------------------------------


def _with_remaining(raw_json_value: str) -> bytes:
    """The rich state with `budget.remaining` replaced by a raw JSON value (text as written)."""
    marker = b'"remaining": "9.9999972222222222222222222222"'
    assert RICH_BEING.count(marker) == 1
    return RICH_BEING.replace(marker, b'"remaining": ' + raw_json_value.encode())


@pytest.mark.parametrize(
    ("raw", "rendered"),
    [
        ('"10"', "10"),
        ("10", "10"),
        ('"9.98"', "9.98"),
        ("9.98", "9.98"),
        ('"10.50"', "10.50"),
        ("10.50", "10.50"),
        ('"1E-7"', "0.0000001"),
        ("1E-7", "0.0000001"),
        ("1e2", "100"),
        ('"0.0000027777777777777777777778"', "0.0000027777777777777777777778"),
        ("0.0000027777777777777777777778", "0.0000027777777777777777777778"),
        ("79228162514264337593543950335", "79228162514264337593543950335"),
        ('"-0"', "0"),
    ],
)
def test_money_accepted_as_string_or_number_and_rendered_plain(raw: str, rendered: str) -> None:
    state = parse_state(_with_remaining(raw))
    assert isinstance(state.budget.remaining, Decimal)
    document = json.loads(state.to_json())
    assert document["budget"]["remaining"] == rendered
    assert "E" not in document["budget"]["remaining"].upper()


def test_number_money_is_exact_not_a_float() -> None:
    state = parse_state(_with_remaining("0.1"))
    assert state.budget.remaining == Decimal("0.1")
    assert state.budget.remaining != Decimal.from_float(0.1)


def test_non_money_numbers_are_unchanged_by_exact_money_parsing() -> None:
    document = _doc()
    document["conversation"][1]["content"] = {"score": 0.5, "n": 3}
    state = parse_state(_bytes(document))
    content = state.conversation[1]["content"]
    assert content == {"score": 0.5, "n": 3}
    assert json.loads(state.to_json())["conversation"][1]["content"] == {"score": 0.5, "n": 3}


@settings(max_examples=150)
@given(
    amount=st.builds(
        lambda digits, scale: Decimal(digits).scaleb(-scale),
        st.integers(0, 10**28 - 1) | st.integers(0, 1000),
        st.integers(0, 28),
    ),
    as_number=st.booleans(),
)
def test_money_round_trips_exactly(amount: Decimal, as_number: bool) -> None:
    text = format(amount, "f")
    raw = text if as_number else f'"{text}"'
    state = parse_state(_with_remaining(raw))
    assert state.budget.remaining == amount
    assert json.loads(state.to_json())["budget"]["remaining"] == text
    again = parse_state(state.to_json())
    assert again.to_json() == state.to_json()


@settings(max_examples=100)
@given(text=st.text(st.characters(codec="utf-8"), max_size=40))
def test_text_round_trips_without_escaping_non_ascii(text: str) -> None:
    document = _doc()
    document["mind"]["rules"] = [text]
    document["conversation"][1]["content"] = text
    state = parse_state(_bytes(document))
    data = state.to_json()
    assert parse_state(data).to_json() == data
    assert data.decode("utf-8") == json.dumps(json.loads(data), indent=2, ensure_ascii=False)


# --- schema version and malformed JSON --------------------------------------------------


@pytest.mark.parametrize("version", ["being-v2", "being-v0", "", "BEING-V1"])
def test_other_schema_version_is_a_state_error(version: str) -> None:
    document = _doc()
    document["schema_version"] = version
    with pytest.raises(StateError) as caught:
        parse_state(_bytes(document))
    assert str(caught.value) == f"state: unsupported state schema {version}"
    assert caught.value.exit_code == 4


def test_schema_version_is_checked_before_the_shape() -> None:
    document = {"schema_version": "being-v2", "something": "else entirely"}
    with pytest.raises(StateError) as caught:
        parse_state(_bytes(document))
    assert str(caught.value) == "state: unsupported state schema being-v2"


@pytest.mark.parametrize("version", [None, 1, ["being-v1"]])
def test_missing_or_non_string_schema_version_is_a_json_failure(version: object) -> None:
    document = _doc()
    if version is None:
        del document["schema_version"]
    else:
        document["schema_version"] = version
    _json_failure(_bytes(document))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"not json",
        b"[]",
        b'"being-v1"',
        b"null",
        RICH_BEING[:-1],
        RICH_BEING + b"x",
        b"\xff\xfe" + RICH_BEING,
        RICH_BEING.replace(b'"cycle": 12', b'"cycle": 12, "cycle": 13'),
        RICH_BEING.replace(b'"total_tokens": 1234', b'"total_tokens": NaN'),
    ],
    ids=[
        "empty",
        "open-brace",
        "text",
        "array",
        "string",
        "null",
        "truncated",
        "trailing",
        "bad-utf8",
        "duplicate-key",
        "nan",
    ],
)
def test_malformed_json_is_a_json_failure(data: bytes) -> None:
    _json_failure(data)
