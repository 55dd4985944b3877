"""Request parts encoded once (`gateway.encoding`): the body assembled from each message's
bytes is the body of the whole document, and a kept encoding is never stale."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from singularity.gateway.encoding import (
    SWEEP_SLACK,
    EncodedMessages,
    Pieces,
    WireCache,
    pieces_of,
)
from singularity.gateway.wire import completion_body
from singularity.jsoncodec import compact, compact_utf8, string_utf8
from singularity.mind.context import estimate_tokens, message_size, select_context
from singularity.text import safe_json
from singularity.tools.base import ToolDefinition

TOOLS = [
    ToolDefinition("t", "Ręczne narzędzie.", {"type": "object", "properties": {}}),
    ToolDefinition("u", "Another.", {"type": "object", "properties": {"x": {"type": "integer"}}}),
]


def whole_document(
    model: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    temperature: float,
    tools: list[ToolDefinition],
    tool_choice: str | None,
) -> bytes:
    """The request body as the whole document, encoded at once (spec §9.3)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": temperature,
    }
    if tools:
        body["tools"] = [tool.wire() for tool in tools]
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
    return compact_utf8(body)


# Any text, lone surrogates included (written as U+FFFD), and any JSON value inside.
texts = st.text(st.characters(codec=None), max_size=12)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"])}).flatmap(
        lambda head: st.dictionaries(texts, values, max_size=3).map(lambda rest: {**head, **rest})
    ),
    max_size=5,
)


@given(
    model=texts,
    messages=messages,
    max_tokens=st.integers(0, 10**6),
    temperature=st.floats(0, 2),
    tools=st.sampled_from([[], TOOLS[:1], TOOLS]),
    tool_choice=st.none() | texts,
)
@example(
    model="m",
    messages=[{"role": "user", "content": "\ud800x"}],
    max_tokens=5,
    temperature=1.0,
    tools=TOOLS,
    tool_choice="auto",
)
def test_the_assembled_body_is_the_whole_documents_bytes(
    model: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    temperature: float,
    tools: list[ToolDefinition],
    tool_choice: str | None,
) -> None:
    expected = whole_document(model, messages, max_tokens, temperature, tools, tool_choice)
    cache = WireCache()
    plain = completion_body(model, messages, max_tokens, temperature, tools, tool_choice)
    encoded = completion_body(
        model, cache.encode(messages), max_tokens, temperature, tools, tool_choice, cache=cache
    )
    assert plain == encoded == expected


@given(messages)
def test_a_messages_size_is_its_request_bytes(messages: list[dict[str, Any]]) -> None:
    cache = WireCache()
    for message in messages:
        assert message_size(message) == cache.size_of(message) == len(compact_utf8(message))


def test_each_message_is_encoded_once_while_it_is_kept() -> None:
    cache = WireCache()
    message = {"role": "user", "content": "hello"}
    first = cache.bytes_of(message)
    assert first == b'{"role":"user","content":"hello"}'
    assert cache.bytes_of(message) is first
    assert cache.encode([message]).encoded[0] is first


def test_a_replaced_value_is_encoded_anew() -> None:
    # Withholding a secret replaces a message's values in place (LiveBeing).
    cache = WireCache()
    message: dict[str, Any] = {"role": "tool", "content": "token sk-secret"}
    cache.bytes_of(message)
    message["content"] = "token [withheld]"
    assert cache.bytes_of(message) == b'{"role":"tool","content":"token [withheld]"}'
    message["name"] = "t"
    assert cache.bytes_of(message) == b'{"role":"tool","content":"token [withheld]","name":"t"}'


def test_forgotten_messages_are_encoded_again_once_they_outnumber_the_kept() -> None:
    cache = WireCache()
    kept: dict[str, Any] = {"role": "user", "content": "a"}
    gone = [{"role": "user", "content": f"b{index}"} for index in range(SWEEP_SLACK + 2)]
    kept_bytes, gone_bytes = cache.bytes_of(kept), [cache.bytes_of(m) for m in gone]
    cache.keep_only([kept, *gone[1:]])  # as many entries as kept: nothing is swept
    assert cache.bytes_of(gone[0]) is gone_bytes[0]
    cache.keep_only([kept], [])
    assert cache.bytes_of(kept) is kept_bytes
    again = cache.bytes_of(gone[0])
    assert again == gone_bytes[0] and again is not gone_bytes[0]


def test_a_system_message_is_the_round_befores_while_its_parts_are_the_same() -> None:
    cache = WireCache()
    old = cache.system(["the prompt", " and twenty memories"])
    assert cache.system(["the prompt", " and twenty memories"]) is old
    new = cache.system(["the prompt", " and a new memory"])
    assert new is not old and cache.bytes_of(new) == compact_utf8(dict(new))
    assert cache.bytes_of(old) == compact_utf8(dict(old))  # it carries its own encoding
    assert not cache._entries  # so the cache keeps no entry for it


def test_the_tools_array_follows_the_definitions() -> None:
    cache = WireCache()
    assert cache.tools([]) == b"[]"
    both = cache.tools(TOOLS)
    assert both == compact_utf8([tool.wire() for tool in TOOLS])
    assert cache.tools(list(TOOLS)) is both
    assert cache.tools(TOOLS[:1]) == compact_utf8([TOOLS[0].wire()])


def test_encoded_messages_are_a_sequence_of_their_messages() -> None:
    listed = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    encoded = EncodedMessages.of(listed)
    assert list(encoded) == listed and len(encoded) == 2 and encoded[1] == listed[1]
    assert encoded[1:].encoded == (b'{"role":"assistant","content":"b"}',)
    assert EncodedMessages.of(encoded) is encoded


def test_context_selection_with_kept_sizes_selects_what_it_always_did() -> None:
    cache = WireCache()
    window = [
        {"role": "user", "content": "x" * 400},
        {"role": "assistant", "content": "y" * 400},
        {"role": "user", "content": "z" * 40},
    ]
    budget = estimate_tokens(window[2]) + 1
    assert select_context(window, budget, size_of=cache.size_of) == [window[2]]
    assert select_context(window, budget) == [window[2]]
    assert select_context(window, 10_000, size_of=cache.size_of) == window


@given(st.text(st.characters(codec=None)))
@example('\ud800 a\x00\x1f\x7f\u2028"\\/\n\t\b\f\r\U0001f600')
def test_a_string_is_written_as_the_json_module_writes_it(text: str) -> None:
    assert string_utf8(text) == compact_utf8(text)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(st.characters(codec=None)),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(st.characters(codec=None)), inner),
    max_leaves=12,
)


plain = st.none() | st.booleans() | st.integers() | st.text(st.characters(codec=None))


@given(json_values | st.dictionaries(st.text(st.characters(codec=None)), plain) | st.lists(plain))
@example({"role": "tool", "content": '\ud800 a\x00\x7f\u2028"\\/\n', "name": "t"})
@example({"k": [float("nan"), -0.0, 1e16, 10**30]})
def test_a_value_is_written_as_the_json_module_writes_it(value: Any) -> None:
    """`compact_utf8` (a prebuilt C encoder; pydantic-core for a flat dict or list of
    plain values) writes what `json.dumps` writes, with a lone surrogate as U+FFFD."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        expected = text.encode("utf-8")
    except UnicodeEncodeError:
        expected = json.dumps(safe_json(value), separators=(",", ":"), ensure_ascii=False).encode()
    assert compact_utf8(value) == expected
    assert compact(value, sort_keys=True) == json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, sort_keys=True
    )


# A system message's parts from round to round: some kept, some new (a lone surrogate
# in one part and its other half in the next included).
system_parts = st.lists(st.sampled_from(["P", "\n- ", "\ud83d", "\ude00"]) | texts)


@given(st.lists(system_parts, min_size=1, max_size=4))
@example([["prompt", "\ud83d"], ["prompt", "\ud83d", "\ude00", 'a"\n\x00']])
def test_each_system_messages_kept_bytes_are_its_fresh_encoding(
    rounds: list[list[str]],
) -> None:
    cache = WireCache()
    for parts in rounds:
        system = cache.system(parts)
        assert system == {"role": "system", "content": "".join(parts)}
        assert cache.bytes_of(system) == compact_utf8(dict(system))


@given(st.lists(system_parts, min_size=1, max_size=3), messages)
@example([["P", "\ud83d", "\ude00", 'é\x00\x1f\x7f\u2028"\\\n'], ["P", "\ude00"]], [])
def test_a_body_with_a_system_message_of_pieces_is_the_whole_documents_bytes(
    rounds: list[list[str]], conversation: list[dict[str, Any]]
) -> None:
    """The system message's encoding is its parts' bytes, unjoined (`Pieces`), its text
    unjoined until read; the body assembled from them is the straightforward encoding of
    the whole document, the system message a plain dict in it."""
    cache = WireCache()
    assert isinstance(cache.encoding_of(cache.system(["a", "b"])), Pieces)
    for parts in rounds:
        system = cache.system(parts)
        whole = {"role": "system", "content": "".join(parts)}
        sent = cache.encode([system, *conversation])
        assert len(sent.encoded[0]) == len(compact_utf8(whole)) == cache.size_of(system)
        assert sent.encoded[0] == compact_utf8(whole) == sent.encoded[0]
        expected = whole_document("m", [whole, *conversation], 7, 0.5, TOOLS, None)
        assert completion_body("m", sent, 7, 0.5, TOOLS, None, cache=cache) == expected
        assert completion_body("m", [system, *conversation], 7, 0.5, TOOLS, None) == expected


def test_pieces_are_equal_to_the_bytes_they_join_to() -> None:
    pieces = Pieces([b'{"a":', b'"b"}'])
    assert pieces == b'{"a":"b"}' == pieces and pieces == Pieces([b'{"a":"b"}'])
    assert pieces != b'{"a":"c"}' and pieces != '{"a":"b"}' and len(pieces) == 9
    assert bytes(pieces) == b'{"a":"b"}' and pieces_of(pieces) == (b'{"a":', b'"b"}')
    assert pieces_of(b"x") == (b"x",)
