"""The output boundary (spec §10.4, §23 item 13, decision 21).

A tool result's `content` is rejected whole when any of:

1. its compact JSON serialization exceeds 65536 bytes (UTF-8);
2. its nesting depth exceeds 8 (top-level value depth 0, each member or element one
   deeper, an embedded JSON string's value one deeper than the string);
3. an object key, normalized (ASCII-lowercase, `-` and space to `_`), equals or ends
   with `_` + a secret word;
4. a trimmed string value holds NUL, or its lowercase form a private-key PEM header;
5. a string value holds a raw local path token;
6. a string whose trimmed form starts with `{` or `[` does not parse as JSON (if it
   parses, its value is checked by all rules).

The property tests compare the boundary with an oracle written here, recursively and
from the spec's wording, on generated JSON values that include embedded JSON strings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import singularity.tools.boundary as boundary_module
from singularity.jsoncodec import compact
from singularity.tools.boundary import (
    MAX_DEPTH,
    MAX_OUTPUT_BYTES,
    BoundaryRejection,
    check_output,
    has_raw_local_path,
    is_secret_key,
    passes_boundary,
)
from tests.support.reached import Reached

SECRET_WORDS = [
    "secret",
    "password",
    "passwd",
    "token",
    "access_token",
    "refresh_token",
    "api_key",
    "authorization",
    "cookie",
    "private_key",
    "privatekey",
    "credential_path",
    "secret_path",
    "key_path",
]


def size_of(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def rejected(value: Any) -> str:
    """The rejection reason; fails the test when the value passes."""
    with pytest.raises(BoundaryRejection) as caught:
        check_output(value)
    assert not passes_boundary(value)
    return str(caught.value)


def accepted(value: Any) -> None:
    check_output(value)
    assert passes_boundary(value)


def string_of_size(total: int, char: str = "\u00e9") -> str:
    """A string whose compact serialization (quotes included) is exactly `total` bytes."""
    body = total - 2
    width = len(char.encode("utf-8"))
    text = char * (body // width) + "a" * (body % width)
    assert size_of(text) == total
    return text


def nest_lists(depth: int, leaf: Any = 0) -> Any:
    """`leaf` at `depth` inside lists; built iteratively."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nest_dicts(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


# --- constants -------------------------------------------------------------------------


def test_limits_are_the_spec_values() -> None:
    assert MAX_OUTPUT_BYTES == 65536
    assert MAX_DEPTH == 8


# --- rule 1: size ----------------------------------------------------------------------


@pytest.mark.parametrize("char", ["a", "\u00e9", "\u20ac", "\U0001f600"])
def test_size_exactly_at_the_limit_is_accepted_one_more_byte_rejected(char: str) -> None:
    accepted(string_of_size(65536, char))
    assert "65536 bytes" in rejected(string_of_size(65537, char))


def test_size_counts_bytes_not_characters() -> None:
    text = "\u00e9" * 32767  # 32767 characters, 65534 bytes + 2 quotes = 65536
    accepted(text)
    assert "65536 bytes" in rejected(text + "\u00e9")  # 32768 characters, 65538 bytes


def test_size_counts_escapes() -> None:
    # `"` and `\n` serialize as two bytes each, U+0001 as six (\u0001).
    accepted('"' * 32767)
    rejected('"' * 32767 + "a")
    accepted("\n" * 32767)
    rejected("\n" * 32767 + "a")
    accepted("\x01" * 10922 + "aa")  # 6 * 10922 + 2 + 2 quotes = 65536
    rejected("\x01" * 10922 + "aaa")


def test_size_of_an_object_counts_keys_and_punctuation() -> None:
    # {"k":"…"} = 8 bytes of structure and key around the string body.
    accepted({"k": "a" * (65536 - 8)})
    rejected({"k": "a" * (65536 - 7)})
    accepted({"k\u00e9": "a" * (65536 - 10)})
    rejected({"k\u00e9": "a" * (65536 - 9)})


def test_wide_list_of_numbers_at_the_limit() -> None:
    accepted([0] * 32766 + [10])  # 2 + 32766 * 2 + 2 = 65536
    rejected([0] * 32766 + [100])
    rejected([0] * 1_000_000)


def test_wide_object_at_the_limit() -> None:
    value: dict[str, Any] = {f"{i:05d}": 0 for i in range(6553)}  # 2 + 6553*9 + 6552
    assert size_of(value) == 65531
    value[""] = 0  # a comma and `"":0`: 5 more bytes
    assert size_of(value) == 65536
    accepted(value)
    value[""] = 10
    rejected(value)


def test_embedded_json_is_counted_once_as_the_string_it_is() -> None:
    """The size is that of the content's own serialization; an embedded JSON string is
    not counted a second time for its parsed value."""
    inner = "x" * 40000
    text = json.dumps([inner])  # ["xxx…"] : 40004 characters
    assert size_of(text) == 40004 + 2 + 2  # the two inner quotes are escaped
    accepted(text)
    overhead = size_of(compact([""]))  # "[\"\"]" : 8 bytes
    body = string_of_size(65536 - overhead + 2, "\u20ac")
    text = compact([body])
    assert size_of(text) == 65536
    accepted(text)
    rejected(text[:2] + "a" + text[2:])


def test_decimal_is_sized_as_its_money_string() -> None:
    accepted({"amount": Decimal("9.98")})
    accepted([Decimal("1"), string_of_size(65536 - 2 - 1 - 3)])  # ["1", "…"] -> "1" is 3 bytes
    rejected([Decimal("10"), string_of_size(65536 - 2 - 1 - 3)])
    rejected(Decimal("1E+70000"))
    rejected(Decimal("1E-70000"))
    rejected(Decimal("NaN"))
    rejected(Decimal("-Infinity"))
    accepted(Decimal("0E+70000"))  # renders as "0"


def test_large_integers() -> None:
    accepted(10**4000)  # 4001 digits: within the interpreter's conversion limit
    reason = rejected(10**5000)  # beyond it: cannot be serialized, never crashes
    assert "integer" in reason


# --- rule 2: depth ---------------------------------------------------------------------


@pytest.mark.parametrize("nest", [nest_lists, nest_dicts], ids=["lists", "dicts"])
def test_depth_eight_accepted_nine_rejected(nest: Callable[[int, Any], Any]) -> None:
    for leaf in (0, "x", None, True, 1.5):
        accepted(nest(8, leaf))
        assert "depth 8" in rejected(nest(9, leaf))


def test_an_empty_container_at_depth_eight_is_accepted() -> None:
    """Depth belongs to values: an empty list at depth 8 has no element at depth 9."""
    accepted(nest_lists(8, []))
    accepted(nest_lists(8, {}))
    rejected(nest_lists(8, [0]))
    rejected(nest_lists(8, {"a": 0}))


def test_mixed_nesting() -> None:
    value: Any = 0
    for level in range(8):
        value = {"k": value} if level % 2 else [1, value, "x"]
    accepted(value)
    rejected([value])
    rejected({"k": value})


@pytest.mark.parametrize("outer", range(0, 9))
def test_embedded_json_is_one_deeper_than_its_string(outer: int) -> None:
    """A string at depth `outer` holding `0` inside `n` lists puts the 0 at
    outer + 1 + n: the embedded top-level list is one deeper than the string."""
    n = 7 - outer  # the 0 at exactly 8
    if n >= 1:
        accepted(nest_lists(outer, compact(nest_lists(n))))
    if n >= 0:  # the innermost, empty, list at exactly 8
        accepted(nest_lists(outer, compact(nest_lists(n, []))))
    too_deep = compact(nest_lists(n + 1)) if n + 1 >= 1 else "[]"  # one level more
    assert "depth" in rejected(nest_lists(outer, too_deep))


def test_embedded_json_depth_examples() -> None:
    accepted("[[[[[[[0]]]]]]]")  # string 0, lists 1-7, the 0 at 8
    rejected("[[[[[[[[0]]]]]]]]")  # the 0 at 9
    accepted("[[[[[[[[]]]]]]]]")  # innermost (empty) list at 8
    accepted({"a": {"b": '{"c": [1]}'}})  # string 2, object 3, list 4, 1 at 5


def test_embedded_json_depth_precise() -> None:
    # A string at depth 6 holding {"c": [1]}: object 7, list 8, the 1 at 9 -> rejected.
    rejected(nest_dicts(6, '{"c": [1]}'))
    # At depth 5: object 6, list 7, the 1 at 8 -> accepted.
    accepted(nest_dicts(5, '{"c": [1]}'))
    # A bare scalar inside is also one deeper than its string: 7 -> 8.
    accepted(nest_lists(6, "[1]"))
    rejected(nest_lists(7, "[1]"))
    # Whitespace around the embedded text is trimmed first.
    accepted(nest_lists(6, " \u3000[1]\n"))
    rejected(nest_lists(7, " \u3000[1]\n"))


def test_doubly_embedded_json() -> None:
    """Each embedding adds one level: "[\\"[0]\\"]" at depth 0 puts the 0 at depth 4."""
    level2 = compact(["[0]"])  # '["[0]"]': string 0, list 1, string 2, list 3, 0 at 4
    accepted(nest_lists(4, level2))
    rejected(nest_lists(5, level2))
    chain: Any = 0
    for _ in range(4):  # string, list pairs: the 0 ends at depth 8
        chain = compact([chain])
    accepted(chain)
    assert "depth" in rejected([chain])


# --- rule 3: secret-shaped keys --------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "api_token",
        "next_page_token",
        "API-KEY",
        "X Api Key",
        "private_key",
        "Authorization",
        "PASSWORD",
        "db-password",
        "refresh-token",
        "x_refresh_token",
        "Set Cookie",
        "SSH-Key-Path",
        "my privatekey",
    ],
)
def test_secret_shaped_keys_are_rejected(key: str) -> None:
    assert is_secret_key(key)
    assert "secret-shaped key" in rejected({key: None})


@pytest.mark.parametrize("word", SECRET_WORDS)
def test_every_secret_word_alone_and_as_a_suffix(word: str) -> None:
    for key in (word, word.upper(), "x_" + word, "X-" + word.upper(), "a b " + word):
        assert is_secret_key(key), key
        rejected({key: 1})
    for key in (word + "s", word + "_count", word + "_", word + "-id"):
        assert not is_secret_key(key), key
        accepted({key: 1})


@pytest.mark.parametrize(
    "key",
    [
        "total_tokens",
        "tokens",
        "token_count",
        "tokenizer",
        "mytoken",  # no `_` before the word
        "apikey",  # not a listed word (only `privatekey` is)
        "api_key_id",
        "secrets",
        "password_hint",
        "key",
        "path",
        "",
    ],
)
def test_keys_that_do_not_end_with_a_secret_word_are_accepted(key: str) -> None:
    assert not is_secret_key(key)
    accepted({key: "value"})


def test_normalization_is_ascii_only_and_only_dash_and_space() -> None:
    assert not is_secret_key("api\tkey")  # a tab is not normalized
    assert not is_secret_key("api.key")
    assert not is_secret_key("api\u00a0key")  # no-break space is not an ASCII space
    assert not is_secret_key("\u0422OKEN")  # Cyrillic capital TE is not ASCII-lowercased


def test_secret_keys_are_found_at_any_depth_and_inside_embedded_json() -> None:
    rejected(nest_lists(7, {"api_key": 1}))
    rejected({"a": [{"b": {"token": None}}]})
    rejected({"result": '{"data": {"Access-Token": "x"}}'})
    rejected(['[1, {"password": 2}]'])


def test_rejection_reasons_are_safe_to_log() -> None:
    """Reasons are logged: they never carry a string value, and a key is escaped."""
    canary = "CANARY-8d1f"
    for value in (
        f"{canary} /etc/passwd",
        f"{canary}\x00",
        f"-----BEGIN PRIVATE KEY-----{canary}",
        "{" + canary,
        "[" * 9 + canary,
    ):
        assert canary not in rejected({"k": value})
    reason = rejected({"\x1b[2J\u202e_token" + "x" * 100 + "_token": 1})
    assert "\x1b" not in reason and "\u202e" not in reason
    assert len(reason) < 120


def test_secret_values_under_plain_keys_are_not_key_checked() -> None:
    accepted({"name": "token"})
    accepted(["api_key", "password"])


# --- rule 4: NUL and private-key blocks ------------------------------------------------


@pytest.mark.parametrize("text", ["\x00", "a\x00b", " \x00 ", "line\n\x00"])
def test_nul_in_a_string_is_rejected(text: str) -> None:
    assert "NUL" in rejected(text)
    rejected({"a": [text]})


def test_nul_in_a_key_is_not_checked() -> None:
    """Rule 4 applies to string values; keys are checked only by rule 3."""
    accepted({"a\x00b": 1})


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN PRIVATE KEY-----",
        "-----begin private key-----",
        "-----Begin Private Key-----\nMIIEvQ==\n-----END PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "here it is: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==",
        "\n\n-----BEGIN PRIVATE KEY-----\n",
    ],
)
def test_private_key_headers_are_rejected_case_insensitively(text: str) -> None:
    assert "private key" in rejected(text)
    rejected({"file": {"content": text}})
    rejected(compact({"k": text}))  # inside embedded JSON


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        "-----BEGIN PUBLIC KEY-----",
        "-----END PRIVATE KEY-----",
        "-----BEGIN  PRIVATE KEY-----",  # two spaces: not the header
    ],
)
def test_other_pem_headers_are_accepted(text: str) -> None:
    accepted(text)


def test_other_private_key_pem_headers_are_not_checked_per_spec() -> None:
    """Spec §10.4 rule 4 names exactly two headers and says other PEM headers are not
    checked, so legacy PKCS#1/SEC1 headers pass. Kept as specified (decision 21)."""
    accepted("-----BEGIN RSA PRIVATE KEY-----")
    accepted("-----BEGIN EC PRIVATE KEY-----")
    accepted("-----BEGIN ENCRYPTED PRIVATE KEY-----")


# --- rule 5: raw local paths -----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "/etc/passwd",
        "(/tmp/x)",
        '"file:///x"',
        "see: /home",
        " / ",
        "/",
        "[/x]",
        "'/x'",
        "a, /x",
        "file://host/share",
        "two\u3000/spaces",  # split on Unicode whitespace
        "tab\t/x",
        "x\u2028/y",
        ":(/x):",
    ],
)
def test_raw_local_paths_are_rejected(text: str) -> None:
    assert has_raw_local_path(text)
    assert "raw local path" in rejected(text)
    rejected({"a": ["ok", text]})


@pytest.mark.parametrize(
    "text",
    [
        "a/b",
        "http://x/y",
        "https://example.com/path/to",
        "1/2",
        "and/or",
        "x;/y",  # `;` is stripped only at the ends of a token
        "~/notes",
        "./relative",
        "\\/escaped",
        "FILE:///x",  # the prefix is matched as written: `file://`
        "a\x1c/b",  # U+001C is not White_Space, so it does not split tokens
        "",
    ],
)
def test_text_without_a_path_token_is_accepted(text: str) -> None:
    assert not has_raw_local_path(text)
    accepted(text)


def test_keys_are_not_checked_for_paths() -> None:
    accepted({"/etc/passwd": 1, "file:///x": "ok"})


def test_path_inside_embedded_json_is_found_after_parsing() -> None:
    text = '["\\/etc\\/passwd"]'  # the raw token does not start with `/`
    assert not has_raw_local_path(text)
    assert json.loads(text) == ["/etc/passwd"]
    rejected(text)


# --- rule 6: embedded JSON -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["{", "[", "{not json", "[1,", "[1]x", "{'a': 1}", "[NaN]", "[Infinity]", "[1e400]"],
)
def test_text_starting_like_json_that_does_not_parse_is_rejected(text: str) -> None:
    assert rejected(text)
    rejected({"out": "  " + text})


def test_embedded_json_with_duplicate_keys_is_rejected() -> None:
    rejected('{"a": 1, "a": 2}')


@pytest.mark.parametrize(
    "text", ["{}", "[]", ' {"a": [1, "b", null, true]} ', "[1.5e3]", "\u3000[0]\u2029"]
)
def test_text_that_is_json_is_accepted_when_its_value_passes(text: str) -> None:
    accepted(text)


def test_text_with_json_not_at_the_start_is_not_parsed() -> None:
    accepted("result: {not json")
    accepted('"[not json"')


def test_embedded_json_is_checked_by_every_rule() -> None:
    rejected('{"api_key": "x"}')
    rejected('["a\\u0000b"]')
    rejected('["-----BEGIN PRIVATE KEY-----"]')
    rejected('["see \\/tmp"]')
    rejected('["{broken"]')
    rejected('["\\ud800"]')  # a lone surrogate has no UTF-8 form
    rejected('{"\\udfff": 1}')
    accepted('["\\ud83d\\ude00"]')  # a well-formed pair


# --- scalars and non-JSON values -------------------------------------------------------


@pytest.mark.parametrize(
    "value", [0, -1, 10**20, 1.5, -0.0, 1e308, 5e-324, True, False, None], ids=repr
)
def test_numbers_booleans_and_null_always_pass(value: Any) -> None:
    accepted(value)
    accepted({"n": value})
    accepted([value] * 3)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=repr)
def test_non_finite_floats_are_rejected(value: float) -> None:
    """JSON has no NaN or Infinity; the codec would write invalid JSON."""
    assert "finite" in rejected(value)
    rejected({"x": [value]})


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        frozenset(),
        b"bytes",
        bytearray(b"x"),
        object(),
        complex(1, 2),
        {1: "int key"},
        {("a",): 1},
        [{"ok": {"nested": {3}}}],
        range(3),
    ],
    ids=lambda v: type(v).__name__,
)
def test_non_json_values_are_rejected_not_crashed(value: Any) -> None:
    assert rejected(value)


def test_mixed_key_types_are_rejected() -> None:
    """The tool message sorts keys; mixed int/str keys could not be sorted."""
    rejected({"a": 1, 2: "b"})


def test_tuples_are_checked_as_arrays() -> None:
    """json.dumps writes tuples as arrays, so their contents are checked like lists."""
    accepted(("a", 1, None))
    rejected(("a", "/etc/passwd"))
    rejected(nest_lists(8, ("x",)))


@pytest.mark.parametrize("value", ["\ud800", "a\udfff", {"k": ["\udc00"]}, {"\ud800": 1}])
def test_lone_surrogates_are_rejected(value: Any) -> None:
    """A lone surrogate has no UTF-8 serialization."""
    assert "surrogate" in rejected(value)


def test_cyclic_values_are_rejected_by_depth() -> None:
    looped: list[Any] = []
    looped.append(looped)
    assert "depth" in rejected(looped)
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    assert "depth" in rejected(cyclic)


def test_compact_is_never_reached_with_a_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def spy(value: Any, *, sort_keys: bool = False) -> str:
        seen.append(value)
        return compact(value, sort_keys=sort_keys)

    monkeypatch.setattr(boundary_module, "compact", spy)
    for value in (nest_lists(100), {1, 2}, [math.nan], 10**5000, "\ud800", {1: 2}):
        rejected(value)
    assert seen == []
    check_output({"ok": [1]})
    assert seen == [{"ok": [1]}]


# --- deep and wide inputs --------------------------------------------------------------


@pytest.mark.timeout(120)
def test_list_nested_100000_deep_is_rejected_without_recursion() -> None:
    assert "depth" in rejected(nest_lists(100_000))


@pytest.mark.timeout(120)
def test_dict_nested_100000_deep_is_rejected_without_recursion() -> None:
    assert "depth" in rejected(nest_dicts(100_000))


@pytest.mark.timeout(120)
def test_bracket_string_100000_deep_is_rejected() -> None:
    text = "[" * 100_000 + "]" * 100_000
    assert "65536 bytes" in rejected(text)  # 200002 bytes: the size rule fires first
    rejected({"a": text})


@pytest.mark.timeout(120)
def test_deep_embedded_json_within_the_size_limit_never_reaches_the_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(text: str | bytes) -> Any:
        raise AssertionError("the parser was given deep text")

    monkeypatch.setattr(boundary_module, "loads_strict", refuse)
    for text in (
        "[" * 30_000 + "]" * 30_000,
        '{"a":' * 8_000 + "1" + "}" * 8_000,
        "[" * 10,  # not even valid, but too deep to parse
        " [[[[[[[[[0]]]]]]]]] ",
    ):
        assert "depth" in rejected(text)
    assert "depth" in rejected(nest_lists(7, "[[0]]"))


@pytest.mark.timeout(120)
def test_shared_references_do_not_multiply_the_work() -> None:
    value: Any = [0]
    for _ in range(7):
        value = [value] * 1000  # 1000**7 leaves at depth 8 if walked naively
    assert "65536 bytes" in rejected(value)


@pytest.mark.timeout(120)
def test_very_long_strings_are_rejected_by_size() -> None:
    rejected("x" * 10_000_000)
    rejected("[" + "0," * 5_000_000 + "0]")
    rejected({f"k{i}": i for i in range(200_000)})


# --- §23 item 13: documented false positives (decision 21) -----------------------------


def test_false_positive_fraction_with_a_lone_slash() -> None:
    """Known, deliberate false positive (spec §23.13, decision 21): a fraction written
    with spaces, `3 / 4`, has a lone `/` token, which counts as a raw local path."""
    rejected("the ratio is 3 / 4")


def test_false_positive_fraction_token_starting_with_a_slash() -> None:
    """Known, deliberate false positive (spec §23.13, decision 21): in `1 /2` the token
    `/2` starts with `/`. (`1/2` as one token is accepted.)"""
    rejected("1 /2")
    accepted("1/2")


def test_false_positive_url_path() -> None:
    """Known, deliberate false positive (spec §23.13, decision 21): the path part of a
    URL written on its own, as in an HTTP request line, starts with `/`."""
    rejected("GET /api/v1/users HTTP/1.1")
    rejected({"route": "/health"})


def test_false_positive_unix_path_in_a_file() -> None:
    """Known, deliberate false positive (spec §10.4 consequences, §23.13, decision 21):
    reading a file whose text mentions a Unix path rejects the whole result."""
    content = "#!/bin/sh\nexec /usr/bin/env python3 main.py\n"
    rejected({"path": "run.sh", "content": content})


def test_false_positive_file_with_a_lone_slash_token() -> None:
    """Known, deliberate false positive (spec §10.4 consequences, decision 21): a file
    containing a lone `/` token, e.g. prose with `and / or`."""
    rejected({"path": "notes.md", "content": "use tabs and / or spaces"})


def test_false_positive_text_starting_with_a_brace_that_is_not_json() -> None:
    """Known, deliberate false positive (spec §10.4 consequences, §23.13, decision 21):
    a file whose text starts with `{` but is not JSON, e.g. a template."""
    rejected({"path": "t.j2", "content": "{{ greeting }}, world"})
    rejected({"path": "style.css", "content": "{ color: red }"})


def test_false_positive_text_starting_with_a_bracket_that_is_not_json() -> None:
    """Known, deliberate false positive (spec §23.13, decision 21): text starting with `[`
    that is not JSON, e.g. a log line or an INI section header."""
    rejected("[WARN] disk almost full")
    rejected({"path": "app.ini", "content": "[server]\nport = 8080\n"})


def test_false_positive_recalled_memory_mentioning_an_absolute_path() -> None:
    """Known, deliberate false positive (spec §10.4 consequences, decision 21): a recalled
    memory that mentions an absolute path rejects the whole recall result."""
    memory = {"id": "m1", "kind": "fact", "text": "config lives in /etc/app", "sources": []}
    rejected({"memories": [memory]})


# --- properties ------------------------------------------------------------------------

WHITE_SPACE = frozenset(
    {*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B)}
    | {0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
)


def oracle_trim(text: str) -> str:
    start, end = 0, len(text)
    while start < end and ord(text[start]) in WHITE_SPACE:
        start += 1
    while end > start and ord(text[end - 1]) in WHITE_SPACE:
        end -= 1
    return text[start:end]


def oracle_tokens(text: str) -> list[str]:
    tokens, current = [], ""
    for char in text:
        if ord(char) in WHITE_SPACE:
            tokens.append(current)
            current = ""
        else:
            current += char
    return [*tokens, current]


def oracle_secret(key: str) -> bool:
    normalized = ""
    for char in key:
        if char in "- ":
            normalized += "_"
        elif "A" <= char <= "Z":
            normalized += chr(ord(char) + 32)
        else:
            normalized += char
    return any(normalized == w or normalized.endswith("_" + w) for w in SECRET_WORDS)


def oracle_parse(text: str) -> tuple[bool, Any]:
    def no_constants(name: str) -> Any:
        raise ValueError(name)

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("duplicate")
        return dict(pairs)

    try:
        return True, json.loads(text, parse_constant=no_constants, object_pairs_hook=unique)
    except ValueError:
        return False, None


def oracle_ok(value: Any, depth: int) -> bool:
    """Rules 2-6, recursively (the generated values are shallow)."""
    if depth > 8:
        return False
    if isinstance(value, dict):
        return all(
            isinstance(k, str)
            and not any(0xD800 <= ord(c) <= 0xDFFF for c in k)
            and not oracle_secret(k)
            and oracle_ok(v, depth + 1)
            for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return all(oracle_ok(v, depth + 1) for v in value)
    if isinstance(value, str):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            return False
        trimmed = oracle_trim(value)
        if "\x00" in trimmed:
            return False
        lowered = trimmed.lower()
        if "-----begin private key-----" in lowered:
            return False
        if "-----begin openssh private key-----" in lowered:
            return False
        for token in oracle_tokens(value):
            token = token.strip(",;:()[]'\"")
            if token.startswith("/") or token.startswith("file://"):
                return False
        if trimmed[:1] in ("{", "["):
            parsed, embedded = oracle_parse(trimmed)
            return parsed and oracle_ok(embedded, depth + 1)
        return True
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return False


def oracle(value: Any) -> bool:
    if not oracle_ok(value, 0):
        return False
    return size_of(value) <= 65536


ATOMS = [
    "/etc/passwd",
    "a/b",
    "1/2",
    " / ",
    "file:///x",
    "http://x/y",
    "(/tmp/x)",
    "see: /home",
    "-----BEGIN PRIVATE KEY-----",
    "-----begin openssh private key-----",
    "-----BEGIN CERTIFICATE-----",
    "{",
    "[",
    "{}",
    "[]",
    "[1,",
    "[NaN]",
    "[1e400]",
    '{"a":1,"a":2}',
    "\x00",
    "\ud800",
    "\u00e9",
    "\U0001f600",
    "\u202e",
    "\u3000",
    "\x1c/x",
    "word",
    "",
]
KEYS = [
    "api_token",
    "next_page_token",
    "API-KEY",
    "X Api Key",
    "private_key",
    "total_tokens",
    "tokens",
    "token_count",
    "secret",
    "name",
    "/path",
    "a",
    "",
    "\ud800",
]
CHARS = st.one_of(
    st.characters(),
    st.sampled_from(["/", "{", "[", "]", "}", '"', "\\", ":", " ", "\u3000", "\x00", "\ud800"]),
)
texts = st.one_of(
    st.text(alphabet=CHARS, max_size=12),
    st.sampled_from(ATOMS),
    st.lists(st.sampled_from(ATOMS), max_size=4).map(" ".join),
)
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=8))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # includes NaN and infinities
    texts,
)
SPACES = st.sampled_from(["", " ", "\n", "\u3000", "\t "])


def embed(parts: tuple[str, Any, str]) -> str:
    before, value, after = parts
    return before + compact(value) + after


json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(keys, children, max_size=4),
        st.tuples(SPACES, children, SPACES).map(embed),
    ),
    max_leaves=20,
)


def wrap(value: Any, shells: list[str]) -> Any:
    for shell in shells:
        if shell == "list":
            value = [value]
        elif shell == "dict":
            value = {"k": value}
        else:
            value = compact([value])
    return value


deep_values = st.builds(
    wrap, json_values, st.lists(st.sampled_from(["list", "dict", "embed"]), max_size=11)
)
python_values = st.recursive(
    st.one_of(
        scalars,
        st.binary(max_size=4),
        st.sets(st.integers(), max_size=2),
        st.decimals(allow_nan=True, places=2, min_value=-(10**6), max_value=10**6),
        st.decimals(allow_nan=True, allow_infinity=True),
        st.just(object()),
        st.complex_numbers(max_magnitude=10),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.one_of(keys, st.integers(), st.none()), children, max_size=3),
    ),
    max_leaves=10,
)


def deepest(value: Any, depth: int = 0) -> int:
    """The deepest value, following embedded JSON (for accepted, shallow values)."""
    if isinstance(value, dict):
        return max([depth, *(deepest(v, depth + 1) for v in value.values())])
    if isinstance(value, list | tuple):
        return max([depth, *(deepest(v, depth + 1) for v in value)])
    if isinstance(value, str) and oracle_trim(value)[:1] in ("{", "["):
        return deepest(json.loads(oracle_trim(value)), depth + 1)
    return depth


def secret_keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        found = [k for k in value if oracle_secret(k)]
        return found + [s for v in value.values() for s in secret_keys(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in secret_keys(v)]
    if isinstance(value, str) and oracle_trim(value)[:1] in ("{", "["):
        return secret_keys(json.loads(oracle_trim(value)))
    return []


def outcome(value: Any) -> bool:
    """check_output and passes_boundary agree; only BoundaryRejection is ever raised."""
    try:
        check_output(value)
        result = True
    except BoundaryRejection:
        result = False
    assert passes_boundary(value) is result
    return result


def test_boundary_matches_oracle_on_json_values() -> None:
    reached = Reached("passed", "rejected")

    @settings(max_examples=400)
    @given(value=st.one_of(json_values, deep_values))
    @example(value="[[[[[[[[0]]]]]]]]")
    @example(value={"a": '["\\/x"]'})
    @example(value=("/x",))
    @example(value="a\x1c/b")
    def one_value(value: Any) -> None:
        result = outcome(value)
        assert result == oracle(value)
        reached.note("passed" if result else "rejected")
        if result:
            assert size_of(value) <= MAX_OUTPUT_BYTES
            assert deepest(value) <= MAX_DEPTH
            assert secret_keys(value) == []
            compact(value, sort_keys=True).encode("utf-8")  # the tool message can be built

    one_value()
    reached.assert_all()


@settings(max_examples=300)
@given(value=python_values)
def test_boundary_never_crashes_on_python_values(value: Any) -> None:
    if outcome(value):
        assert len(compact(value, sort_keys=True).encode("utf-8")) <= MAX_OUTPUT_BYTES


@st.composite
def padded_to_limit(draw: st.DrawFn) -> tuple[Any, Any, bool]:
    """A small passing value padded with a string so the whole is exactly the limit
    (or one byte over), in a list or object, with the padding before or after."""
    value = draw(json_values.filter(lambda v: oracle(v) and deepest(v) <= 7))
    char = draw(st.sampled_from(["a", "\u00e9", "\u20ac", "\U0001f600", '"']))
    over = draw(st.booleans())
    shape = draw(st.sampled_from(["list-first", "list-last", "dict"]))

    def build(pad: str) -> Any:
        if shape == "list-first":
            return [pad, value]
        if shape == "list-last":
            return [value, pad]
        return {"v": value, "p": pad}

    body = 65536 + over - size_of(build(""))
    width = len(json.dumps(char, ensure_ascii=False).encode("utf-8")) - 2
    pad = char * (body // width) + "b" * (body % width)
    whole = build(pad)
    assert size_of(whole) == 65536 + over
    return whole, value, over


def test_exactly_the_limit_passes_one_byte_more_fails() -> None:
    reached = Reached("at the limit", "one byte over")

    @settings(max_examples=60)
    @given(case=padded_to_limit())
    def one_case(case: tuple[Any, Any, bool]) -> None:
        whole, _, over = case
        assert outcome(whole) is (not over)
        reached.note("one byte over" if over else "at the limit")

    one_case()
    reached.assert_all()
