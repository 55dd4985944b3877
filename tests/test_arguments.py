"""The "required text" rule for built-in tool arguments (spec §2, §11).

Contract: the argument must be a JSON string; it is trimmed of Unicode whitespace
(the White_Space property); the trimmed value must be non-empty, within its bound in
UTF-8 bytes and free of control characters (general category Cc). Anything else is
`ToolArgumentError` with error code `invalid_arguments` and the message `<key> is invalid`.

The property tests compare the validator with an oracle written independently here, from
code point ranges rather than from `unicodedata` or the module's own helpers.
"""

from __future__ import annotations

import sys
import unicodedata
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from singularity.tools.arguments import (
    UNICODE_WHITESPACE,
    check_required_text,
    has_control,
    required_text,
    trim,
    utf8_length,
)
from singularity.tools.base import ToolArgumentError

# --- an independent oracle -------------------------------------------------------------

# The Unicode White_Space property, written out as code points (PropList.txt).
WHITE_SPACE = frozenset(
    {*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B)}
    | {0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
)
CONTROLS = [*range(0x00, 0x20), *range(0x7F, 0xA0)]  # general category Cc
BIDI_CONTROLS = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]  # Cf, not Cc
SPEC_BOUNDS = {"kind": 64, "text": 16384, "query": 1024, "model": 256, "path": 4096}


def oracle_trim(text: str) -> str:
    start, end = 0, len(text)
    while start < end and ord(text[start]) in WHITE_SPACE:
        start += 1
    while end > start and ord(text[end - 1]) in WHITE_SPACE:
        end -= 1
    return text[start:end]


def oracle_bytes(text: str) -> int | None:
    total = 0
    for char in text:
        point = ord(char)
        if 0xD800 <= point <= 0xDFFF:
            return None
        total += 1 if point < 0x80 else 2 if point < 0x800 else 3 if point < 0x10000 else 4
    return total


def oracle_required(value: object, bound: int) -> str | None:
    if not isinstance(value, str):
        return None
    text = oracle_trim(value)
    size = oracle_bytes(text)
    if not text or size is None or size > bound:
        return None
    if any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in text):
        return None
    return text


def assert_invalid(arguments: dict[str, Any], key: str, bound: int) -> None:
    with pytest.raises(ToolArgumentError) as caught:
        required_text(arguments, key, bound)
    assert caught.value.message == f"{key} is invalid"
    assert str(caught.value) == f"{key} is invalid"
    assert caught.value.error_code == "invalid_arguments"


# --- contract, byte for byte -----------------------------------------------------------


def test_error_message_is_key_is_invalid_byte_for_byte() -> None:
    with pytest.raises(ToolArgumentError) as caught:
        required_text({"text": ""}, "text", 16384)
    assert caught.value.message.encode("utf-8") == b"text is invalid"
    assert caught.value.error_code.encode("utf-8") == b"invalid_arguments"


@pytest.mark.parametrize("key", ["kind", "text", "query", "model", "path", "rule", "weird key"])
def test_message_names_the_key(key: str) -> None:
    assert_invalid({}, key, 64)


@pytest.mark.parametrize(
    "value",
    [None, 0, 1, -1.5, 0.0, True, False, [], ["a"], {}, {"a": "b"}, b"bytes"],
    ids=repr,
)
def test_non_string_json_values_are_invalid(value: object) -> None:
    assert check_required_text(value, 64) is None
    assert_invalid({"kind": value}, "kind", 64)


def test_missing_key_is_invalid() -> None:
    assert_invalid({"other": "x"}, "kind", 64)


def test_valid_value_is_returned_trimmed() -> None:
    assert required_text({"kind": " \t note \n"}, "kind", 64) == "note"
    assert required_text({"kind": "\u3000\u00a0note\u2029"}, "kind", 64) == "note"
    assert required_text({"kind": "a b\u00a0c"}, "kind", 64) == "a b\u00a0c"


@pytest.mark.parametrize(
    "value", ["", " ", "\t\n\r", "\u3000", "\u00a0\u2028\u2029\u0085", UNICODE_WHITESPACE]
)
def test_empty_and_whitespace_only_are_invalid(value: str) -> None:
    assert_invalid({"text": value}, "text", 16384)


# --- whitespace ------------------------------------------------------------------------


def test_unicode_whitespace_is_exactly_the_white_space_property() -> None:
    assert frozenset(map(ord, UNICODE_WHITESPACE)) == WHITE_SPACE
    assert len(UNICODE_WHITESPACE) == len(WHITE_SPACE) == 25


def test_white_space_differs_from_str_isspace_only_by_information_separators() -> None:
    """Python's isspace() also covers U+001C..U+001F, which trim must keep."""
    isspace = {p for p in range(sys.maxunicode + 1) if chr(p).isspace()}
    assert isspace - WHITE_SPACE == {0x1C, 0x1D, 0x1E, 0x1F}
    assert WHITE_SPACE - isspace == set()


@pytest.mark.parametrize("point", [0x1C, 0x1D, 0x1E, 0x1F])
def test_information_separators_are_not_trimmed_and_make_the_value_invalid(point: int) -> None:
    char = chr(point)
    assert trim(char + "a" + char) == char + "a" + char
    assert_invalid({"kind": char + "a"}, "kind", 64)
    assert_invalid({"kind": "a" + char}, "kind", 64)


@pytest.mark.parametrize("char", ["\u200b", "\ufeff", "\u180e", "\u2060"])
def test_zero_width_format_characters_are_neither_trimmed_nor_controls(char: str) -> None:
    """Not White_Space and not Cc: kept as they are."""
    assert required_text({"kind": char + "a" + char}, "kind", 64) == char + "a" + char


# --- control characters ----------------------------------------------------------------


def test_control_set_is_category_cc() -> None:
    cc = [p for p in range(sys.maxunicode + 1) if unicodedata.category(chr(p)) == "Cc"]
    assert cc == CONTROLS


@pytest.mark.parametrize("point", CONTROLS, ids=lambda p: f"U+{p:04X}")
def test_every_control_character_in_the_interior_is_invalid(point: int) -> None:
    assert has_control(f"a{chr(point)}b")
    assert_invalid({"text": f"a{chr(point)}b"}, "text", 16384)


@pytest.mark.parametrize("point", CONTROLS, ids=lambda p: f"U+{p:04X}")
def test_control_character_at_the_ends_is_invalid_unless_it_is_whitespace(point: int) -> None:
    """\\t \\n \\v \\f \\r and U+0085 are both Cc and White_Space: trimmed away at the ends."""
    for value in (chr(point) + "ab", "ab" + chr(point)):
        if point in WHITE_SPACE:
            assert required_text({"text": value}, "text", 16384) == "ab"
        else:
            assert_invalid({"text": value}, "text", 16384)


def test_escape_sequences_are_invalid() -> None:
    assert_invalid({"text": "\x1b[31mred\x1b[0m"}, "text", 16384)
    assert_invalid({"text": "ok\rspoofed"}, "text", 16384)
    assert_invalid({"text": "ok\x08\x08"}, "text", 16384)


@pytest.mark.parametrize("point", BIDI_CONTROLS, ids=lambda p: f"U+{p:04X}")
def test_bidi_controls_are_accepted(point: int) -> None:
    """Decision: "control character" is category Cc only (spec §2), so the bidi
    embeddings, overrides and isolates (Cf) are accepted and kept: memories may be in any
    script, and right-to-left text legitimately uses them."""
    value = f"abc{chr(point)}\u05d0\u05d1{chr(point)}"
    assert unicodedata.category(chr(point)) == "Cf"
    assert not has_control(value)
    assert required_text({"text": value}, "text", 16384) == value


def test_right_to_left_text_is_accepted() -> None:
    hebrew = "\u05e9\u05dc\u05d5\u05dd"
    arabic = "\u0645\u0631\u062d\u0628\u0627"
    value = f"\u202b{hebrew}\u202c {arabic} \u2067x\u2069"
    assert required_text({"text": value}, "text", 16384) == value


# --- surrogates ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["\ud800", "a\udfff", "a\ud83db", "\ude00x", "\udbff\udfffz"])
def test_lone_surrogates_are_invalid(value: str) -> None:
    """A JSON escape like "\\ud800" decodes to a lone surrogate, which has no UTF-8 form."""
    assert utf8_length(value) is None
    assert_invalid({"text": value}, "text", 16384)


def test_a_well_formed_astral_character_is_accepted() -> None:
    assert required_text({"text": "\U0001f600"}, "text", 4) == "\U0001f600"


# --- byte bound ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("char", "width"), [("a", 1), ("\u00e9", 2), ("\u20ac", 3), ("\U0001f600", 4)]
)
@pytest.mark.parametrize("bound", [4, 12, 64, 256])
def test_bound_is_in_utf8_bytes_exactly(char: str, width: int, bound: int) -> None:
    count = bound // width
    filler = "a" * (bound - count * width)
    at_bound = char * count + filler
    assert len(at_bound.encode("utf-8")) == bound
    assert required_text({"k": at_bound}, "k", bound) == at_bound
    minus_one = char * (count - 1) + "a" * (width - 1) + filler
    assert len(minus_one.encode("utf-8")) == bound - 1
    assert required_text({"k": minus_one}, "k", bound) == minus_one
    assert_invalid({"k": at_bound + "a"}, "k", bound)
    assert_invalid({"k": char * (count + 1) + filler}, "k", bound)


@pytest.mark.parametrize(("key", "bound"), sorted(SPEC_BOUNDS.items()))
def test_spec_bounds_with_four_byte_characters(key: str, bound: int) -> None:
    at_bound = "\U0001f600" * (bound // 4)
    padded = "\u3000 " + at_bound + "\n\u2029"  # trimmed whitespace does not count
    assert required_text({key: padded}, key, bound) == at_bound
    assert_invalid({key: at_bound + "x"}, key, bound)
    assert_invalid({key: "x" + at_bound}, key, bound)


def test_characters_count_not_bytes_would_be_wrong() -> None:
    value = "\u00e9" * 33  # 33 characters, 66 bytes
    assert_invalid({"kind": value}, "kind", 64)


# --- properties ------------------------------------------------------------------------

SPECIAL = (
    [chr(p) for p in CONTROLS]
    + [chr(p) for p in BIDI_CONTROLS]
    + [chr(p) for p in sorted(WHITE_SPACE)]
    + ["\x1b", "\ud800", "\udbff", "\udc00", "\udfff", "\u200b", "\ufeff"]
    + ["a", "Z", "\u00e9", "\u05d0", "\u20ac", "\u3042", "\U0001f600", "\U00010348"]
)
WIDTH_CHARS = ["a", "\u00e9", "\u0645", "\u20ac", "\u202e", "\U0001f600", "\U00020000"]
adversarial_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(SPECIAL), st.characters(), st.integers(0xD800, 0xDFFF).map(chr)
    ),
    max_size=40,
)
keys = st.sampled_from(["kind", "text", "query", "model", "path"]) | st.text(max_size=10)


def check_against_oracle(value: object, bound: int, key: str = "text") -> None:
    expected = oracle_required(value, bound)
    try:
        result = required_text({key: value}, key, bound)
    except ToolArgumentError as error:
        assert error.message == f"{key} is invalid"
        assert error.error_code == "invalid_arguments"
        assert expected is None, f"rejected valid {value!r}"
        return
    assert expected == result, f"accepted invalid {value!r}"
    assert result == trim(result) and result
    assert not has_control(result)
    assert len(result.encode("utf-8")) <= bound
    assert isinstance(value, str) and oracle_trim(value) == result


@settings(max_examples=400)
@given(value=adversarial_text, bound=st.integers(0, 64), key=keys)
@example(value="\x00", bound=8, key="text")
@example(value="\u2028a\u2029", bound=1, key="text")
@example(value="\u202ea", bound=4, key="text")
@example(value="a\x85", bound=1, key="text")
def test_validator_matches_oracle_on_adversarial_strings(value: str, bound: int, key: str) -> None:
    check_against_oracle(value, bound, key)


@settings(max_examples=200)
@given(value=st.text(alphabet=st.sampled_from(sorted(map(chr, WHITE_SPACE))), max_size=30))
def test_whitespace_only_in_any_unicode_form_is_invalid(value: str) -> None:
    assert_invalid({"text": value}, "text", 16384)


@st.composite
def near_bound(draw: st.DrawFn) -> tuple[str, int, int]:
    """A value whose trimmed form has a known byte size, padded with whitespace, and a
    bound of that size minus one, exactly, or plus one."""
    core = draw(st.lists(st.sampled_from(WIDTH_CHARS), min_size=1, max_size=30))
    # Ends must survive trimming: use a visible first and last character.
    core = [draw(st.sampled_from(["a", "\u00e9", "\u20ac", "\U0001f600"])), *core]
    text = "".join(core)
    size = len(text.encode("utf-8"))
    pad = st.text(alphabet=st.sampled_from(sorted(map(chr, WHITE_SPACE))), max_size=4)
    delta = draw(st.sampled_from([-1, 0, 1]))
    return draw(pad) + text + draw(pad), size, size + delta


@settings(max_examples=300)
@given(case=near_bound())
def test_bound_minus_one_exact_plus_one(case: tuple[str, int, int]) -> None:
    value, size, bound = case
    check_against_oracle(value, bound)
    if bound >= size:
        assert required_text({"text": value}, "text", bound) == oracle_trim(value)
    else:
        assert_invalid({"text": value}, "text", bound)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200)
@given(value=json_values.filter(lambda v: not isinstance(v, str)))
def test_non_string_values_are_invalid(value: object) -> None:
    assert_invalid({"kind": value}, "kind", 16384)


@settings(max_examples=200)
@given(value=adversarial_text)
def test_helpers_match_oracle(value: str) -> None:
    assert trim(value) == oracle_trim(value)
    assert utf8_length(value) == oracle_bytes(value)
    assert has_control(value) == any(ord(c) in CONTROLS for c in value)
