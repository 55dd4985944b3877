"""The output boundary's two modes (decision 21) on values, and the tool message they make.

Contract: `strict` is spec §10.4 (and §10.3's two-key replacement) exactly. `redact`
(the default) rejects only on the size and depth limits, telling the model which; it
replaces a secret-like key's value, a private-key block and a NUL text by markers; shows
a raw local path inside the workspace relative to it and any other as a marker; treats
text that merely starts with `{` or `[` as plain text unless it parses as JSON (then its
value is treated by the same rules); leaves a lone `/` or `//` alone; and says how many
values were replaced and why. A value with nothing to replace is the same in both modes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from singularity.jsoncodec import compact
from singularity.tools.base import Outcome, Status
from singularity.tools.catalogue import REJECTED_CONTENT, tool_message
from singularity.tools.output_boundary import STRICT, OutputBoundary
from singularity.tools.redact import (
    MARKERS,
    NUL_MARKER,
    PATH_MARKER,
    PRIVATE_KEY_MARKER,
    SECRET_MARKER,
)

WS = "/srv/being/ws"
REDACT = OutputBoundary("redact", (WS, "/home/me/ws-link"))
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEcanary\n-----END PRIVATE KEY-----"


def redacted(value: Any) -> tuple[Any, dict[str, int]]:
    bounded = REDACT.apply(value)
    assert bounded.rejection is None, bounded.rejection
    return bounded.content, dict(bounded.redactions)


def strict_rejects(value: Any) -> bool:
    return STRICT.apply(value).rejection is not None


# --- what strict rejected and redact now lets through -------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "[FILE] hello.txt\n[DIR] notes",  # server-filesystem's list_directory
        "read / write access",
        "a // b",
        "[Errno 2] No such file or directory",
        "{not json at all",
        "[1, 2",
        "[",
    ],
)
def test_ordinary_text_passes_redact_unchanged(text: str) -> None:
    assert strict_rejects(text)
    assert redacted(text) == (text, {})


@pytest.mark.parametrize("value", ["/", "//", " / ", "(/)", "'//'"])
def test_a_lone_slash_or_double_slash_is_not_a_path(value: str) -> None:
    assert redacted(value) == (value, {})


# --- paths --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"Successfully wrote to {WS}/hello.txt", "Successfully wrote to hello.txt"),
        (f"{WS}", "."),
        (f"{WS}/", "."),
        (f"({WS}/a/b.txt),", "(a/b.txt),"),
        (f"see {WS}/sub/ now", "see sub/ now"),
        (f"'{WS}/./x/../y.txt'", "'y.txt'"),
        (f"file://{WS}/z.md", "z.md"),
        (f"file://localhost{WS}/z.md", "z.md"),
        ("/home/me/ws-link/q", "q"),  # the workspace as configured, before canonicalizing
        (f"{WS}//double//slashes", "double/slashes"),
    ],
)
def test_a_path_inside_the_workspace_is_shown_relative(text: str, shown: str) -> None:
    assert redacted(text) == (shown, {"workspace path shown relative": 1})


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("cat /etc/passwd", f"cat {PATH_MARKER}"),
        (f"{WS}-other/file", PATH_MARKER),  # a sibling that shares the prefix is outside
        (f"{WS}/../secret.txt", PATH_MARKER),
        ("file://host/share/x", PATH_MARKER),
        ("[/var/log/syslog]", f"[{PATH_MARKER}]"),
        ("/usr/bin:/bin", PATH_MARKER),
    ],
)
def test_any_other_path_is_a_marker(text: str, shown: str) -> None:
    assert strict_rejects(text)
    assert redacted(text) == (shown, {"local path outside the workspace": 1})


def test_paths_are_counted_per_token_and_whitespace_is_kept() -> None:
    text = f"{WS}/a\t/etc/x\n\n/etc/y  {WS}/b"
    assert redacted(text) == (
        f"a\t{PATH_MARKER}\n\n{PATH_MARKER}  b",
        {"local path outside the workspace": 2, "workspace path shown relative": 2},
    )


def test_keys_are_not_paths() -> None:
    assert redacted({"/etc/passwd": 1}) == ({"/etc/passwd": 1}, {})


def test_without_a_workspace_every_path_is_a_marker() -> None:
    bounded = OutputBoundary("redact").apply(f"{WS}/a")
    assert bounded.content == PATH_MARKER


# --- secrets, private keys, NUL -----------------------------------------------------------


def test_a_secret_like_keys_value_is_a_marker_whatever_its_type() -> None:
    value = {
        "api_token": "tok-1",
        "Next-Page Token": {"nested": "x"},
        "password": 42,
        "total_tokens": 7,
        "items": [{"refresh_token": None}],
    }
    assert redacted(value) == (
        {
            "api_token": SECRET_MARKER,
            "Next-Page Token": SECRET_MARKER,
            "password": SECRET_MARKER,
            "total_tokens": 7,
            "items": [{"refresh_token": SECRET_MARKER}],
        },
        {"secret-like key": 4},
    )


@pytest.mark.parametrize(
    "block",
    [
        PEM,
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
        "-----begin private key-----\nlower case",  # no END: to the end of the text
    ],
)
def test_a_private_key_block_is_a_marker_and_the_rest_is_kept(block: str) -> None:
    assert redacted(f"key:\n{block}\nafter") in (
        (f"key:\n{PRIVATE_KEY_MARKER}\nafter", {"private key block": 1}),
        (f"key:\n{PRIVATE_KEY_MARKER}", {"private key block": 1}),
    )


def test_other_pem_blocks_are_kept() -> None:
    cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
    assert redacted(cert) == (cert, {})


def test_a_text_with_nul_is_a_marker() -> None:
    assert redacted(["ok", "bin\x00ary"]) == (["ok", NUL_MARKER], {"text with NUL": 1})


# --- embedded JSON ------------------------------------------------------------------------


def test_embedded_json_is_checked_and_rewritten_only_when_something_changed() -> None:
    untouched = '{"a": [1, 2],  "b": "x"}'
    assert redacted(untouched) == (untouched, {})
    text = json.dumps({"path": f"{WS}/a.txt", "api_key": "k", "n": 1})
    content, counts = redacted(text)
    assert json.loads(content) == {"path": "a.txt", "api_key": SECRET_MARKER, "n": 1}
    assert content == compact(json.loads(content))
    assert counts == {"secret-like key": 1, "workspace path shown relative": 1}
    pretty = json.dumps({"where": "/etc"}, indent=2)
    content, _ = redacted(pretty)
    assert content == json.dumps({"where": PATH_MARKER}, indent=2)


def test_text_that_looks_like_json_with_a_path_is_plain_text() -> None:
    assert redacted("[not json] /etc/hosts") == (
        f"[not json] {PATH_MARKER}",
        {"local path outside the workspace": 1},
    )


def test_embedded_json_with_an_infinite_number_is_plain_text() -> None:
    assert redacted("[1e400]") == ("[1e400]", {})


# --- the limits still reject --------------------------------------------------------------


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("x" * 65535, "output exceeds 65536 bytes"),
        (_deep(9), "nesting exceeds depth 8"),
        (compact(_deep(8)), "nesting exceeds depth 8"),  # embedded: one deeper than its string
        (float("nan"), "number is not finite"),
    ],
)
def test_limits_reject_in_both_modes(value: Any, reason: str) -> None:
    assert REDACT.apply(value).rejection == reason
    assert STRICT.apply(value).rejection == reason


def test_a_result_that_grows_past_the_limit_by_its_markers_is_rejected() -> None:
    value = {f"k{i:04d}_token": "" for i in range(2000)}
    assert len(compact(value)) < 65536
    assert REDACT.apply(value).rejection == "output exceeds 65536 bytes"


# --- both modes agree where nothing is replaced; markers pass both ----------------------


@pytest.mark.parametrize("marker", MARKERS)
def test_every_marker_passes_both_modes_unchanged(marker: str) -> None:
    assert STRICT.apply(marker).rejection is None
    assert redacted(marker) == (marker, {})
    assert redacted(f"a {marker} b") == (f"a {marker} b", {})


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def test_what_strict_passes_redact_passes_unchanged() -> None:
    reached: set[str] = set()

    @settings(max_examples=300)
    @given(JSON_VALUES)
    @example({"a": ["b", 1, None]})  # passes strict
    @example({"api_token": "x", "p": "/etc"})  # rejected by strict, redacted
    def check(value: Any) -> None:
        if STRICT.apply(value).rejection is None:
            reached.add("strict passes")
            assert redacted(value) == (value, {})
        else:
            reached.add("strict rejects")

    check()
    assert sorted(reached) == ["strict passes", "strict rejects"]


@settings(max_examples=300)
@given(JSON_VALUES)
@example({"Token": "x", "t": f"see {WS}/a and /etc/b", "j": '["/x"]'})
def test_redact_is_idempotent_and_its_output_has_nothing_left_to_replace(value: Any) -> None:
    bounded = REDACT.apply(value)
    if bounded.rejection is None:
        assert redacted(bounded.content)[0] == bounded.content
        assert OutputBoundary("redact").apply(bounded.content).redactions == {}


# --- the tool message ---------------------------------------------------------------------


def test_strict_replaces_a_rejected_result_with_the_two_key_content() -> None:
    built = tool_message("c1", "t", Outcome.success({"text": "see /etc/passwd"}), STRICT)
    assert built.message["content"] == REJECTED_CONTENT
    assert built.rejection == "string contains a raw local path"
    assert built.seen_status == "failed"


def test_redact_says_how_many_values_were_replaced_and_why() -> None:
    outcome = Outcome.success({"text": f"wrote {WS}/a.txt", "api_token": "t"})
    built = tool_message("c1", "t", outcome, REDACT)
    assert built.message["content"] == (
        '{"chat_id":null,"content":{"api_token":"<redacted: secret-like key>","text":"wrote a.txt"},'
        '"error_code":null,"message_id":null,'
        '"redacted":{"count":2,"reasons":{"secret-like key":1,"workspace path shown relative":1}},'
        '"status":"success"}'
    )
    assert built.rejection is None
    assert built.seen_status == "success"


def test_redact_tells_the_model_which_limit_withheld_the_result() -> None:
    chat = "0f0e0d0c-0b0a-4908-8706-050403020100"
    outcome = Outcome(Status.SUCCESS, {"text": "x" * 70000}, None, chat)
    built = tool_message("c1", "t", outcome, REDACT)
    assert built.message["content"] == (
        f'{{"chat_id":"{chat}","content":{{"message":"the result was withheld by the output '
        'boundary (output exceeds 65536 bytes); the call ended success"},'
        '"error_code":"output_rejected","message_id":null,"status":"failed"}'
    )
    assert built.seen_status == "failed"


@pytest.mark.parametrize("content", [{"a": [1, "b"]}, "text", None, {"message": "failed: x"}])
def test_with_nothing_to_replace_both_modes_write_the_same_bytes(content: Any) -> None:
    outcome = Outcome.success(content)
    assert (
        tool_message("c", "t", outcome, REDACT).message
        == tool_message("c", "t", outcome, STRICT).message
    )
