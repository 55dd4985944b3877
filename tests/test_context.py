"""What each model round sends of the conversation (decision 8, spec §6.3, §7.3).

Contract of `select_context(messages, budget, opening)`: the result starts with a `user`
message; it never separates an assistant message with tool calls from its tool results
(and never sends a tool result without its assistant message); it always holds the
current cycle's opening messages (framing, and the stimulus of cycle 1), even when the
conversation window has archived them; it is the opening plus the newest messages; it
fits the token budget unless even the opening and the newest round alone do not; and
when the whole current cycle fits, it sends the most whole earlier history that fits.
The properties run over random transcripts of whole cycles, cut at random places as the
window cuts them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from singularity.domain.records import ChatMessage
from singularity.mind.context import estimate_tokens, message_size, select_context
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from singularity.tools.base import FunctionTool, FunctionToolset, Outcome, ToolDefinition
from tests.support.loop_http import boot, state_of
from tests.support.reached import Reached

# --- random transcripts --------------------------------------------------------------------


@dataclass
class Transcript:
    """A conversation window and the current cycle's opening messages."""

    messages: list[ChatMessage]
    opening: list[ChatMessage]
    archived_opening: bool


def _text(size: int, tag: str) -> str:
    return (tag + " ") * max(1, size // (len(tag) + 1))


@st.composite
def transcripts(draw: st.DrawFn) -> Transcript:
    messages: list[ChatMessage] = []
    cycles = draw(st.integers(1, 5))
    opening: list[ChatMessage] = []
    call_number = 0
    for cycle in range(1, cycles + 1):
        framing: ChatMessage = {"role": "user", "content": _text(draw(st.integers(40, 400)), "f")}
        opening = [framing]
        if cycle == 1 and draw(st.booleans()):
            opening.append({"role": "user", "content": _text(draw(st.integers(10, 3000)), "s")})
        messages.extend(opening)
        if draw(st.integers(0, 5)) == 0:
            continue  # a failed cycle: only its framing stays
        for _ in range(draw(st.integers(0, 4))):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                call_number += 1
                calls.append(
                    {
                        "id": f"call_{call_number}",
                        "type": "function",
                        "function": {"name": "tool", "arguments": "{}"},
                    }
                )
            messages.append({"role": "assistant", "content": "", "tool_calls": calls})
            for call in calls:
                size = draw(st.integers(10, 4000))
                messages.append(
                    {
                        "role": "tool",
                        "content": _text(size, "r"),
                        "tool_call_id": call["id"],
                        "name": "tool",
                    }
                )
        if cycle < cycles or draw(st.booleans()):
            messages.append({"role": "assistant", "content": _text(draw(st.integers(1, 300)), "a")})
    # The window may have cut the transcript anywhere.
    cut = draw(st.integers(0, len(messages) - 1))
    window = messages[cut:]
    archived = not all(any(m is o for m in window) for o in opening)
    return Transcript(window, opening, archived)


def cost(messages: list[ChatMessage]) -> int:
    return sum(estimate_tokens(message) for message in messages)


def _index(message: ChatMessage, messages: list[ChatMessage]) -> int | None:
    return next((i for i, m in enumerate(messages) if m is message), None)


def check(transcript: Transcript, budget: int, sent: list[ChatMessage]) -> None:
    messages, opening = transcript.messages, transcript.opening
    assert sent, "something is always sent"
    assert sent[0]["role"] == "user"
    # The opening is always there, whole and in order.
    positions = [_index(o, sent) for o in opening]
    assert None not in positions
    assert positions == list(range(positions[0], positions[0] + len(opening)))  # type: ignore
    # Every tool result follows its assistant message; every call sent is answered.
    seen_calls: set[str] = set()
    for message in sent:
        if message["role"] == "assistant":
            seen_calls |= {call["id"] for call in message.get("tool_calls", [])}
        if message["role"] == "tool":
            assert message["tool_call_id"] in seen_calls
    answered = {m["tool_call_id"] for m in sent if m["role"] == "tool"}
    assert seen_calls <= answered
    # Either a whole suffix of the window from a user message at or before the opening,
    # or the opening followed by the newest rounds (a suffix starting at an assistant).
    first = _index(sent[0], messages)
    rest: list[ChatMessage] = []
    if first is not None and sent == messages[first:]:
        assert not transcript.archived_opening
        if positions[0] == 0:
            rest = sent[len(opening) :]
    else:
        assert sent[: len(opening)] == opening
        rest = sent[len(opening) :]
        if rest:
            start = _index(rest[0], messages)
            assert start is not None and messages[start]["role"] == "assistant"
            assert rest == messages[start:]
    # The budget holds unless the opening and the newest round alone exceed it.
    if cost(sent) > budget:
        assert positions[0] == 0, "more history than the opening was sent over budget"
        newest = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=0)
        assert rest == [] or rest == messages[newest:]


def test_selected_context_is_always_a_valid_request() -> None:
    reached = Reached("archived opening", "opening in the window", "all sent", "cut", "over")

    @settings(max_examples=400)
    @given(transcript=transcripts(), budget=st.integers(1, 6000))
    def one_request(transcript: Transcript, budget: int) -> None:
        sent = select_context(transcript.messages, budget, transcript.opening)
        check(transcript, budget, sent)
        reached.note(
            "archived opening" if transcript.archived_opening else "opening in the window",
            "all sent" if sent == transcript.messages else "cut",
            "over" if cost(sent) > budget else "within",
        )

    one_request()
    reached.assert_all()


def test_the_most_whole_history_that_fits_is_sent() -> None:
    reached = Reached("earlier history sent", "only the cycle fits", "nothing whole fits")

    @settings(max_examples=200)
    @given(transcript=transcripts(), budget=st.integers(1, 20000))
    def one_request(transcript: Transcript, budget: int) -> None:
        messages = transcript.messages
        sent = select_context(messages, budget, transcript.opening)
        if transcript.archived_opening:
            return
        first_opening = next(i for i, m in enumerate(messages) if m is transcript.opening[0])
        fitting = [
            i
            for i in range(first_opening + 1)
            if messages[i]["role"] == "user" and cost(messages[i:]) <= budget
        ]
        if fitting:
            assert sent == messages[fitting[0] :]
            reached.note(
                "earlier history sent" if fitting[0] < first_opening else "only the cycle fits"
            )
        else:
            assert cost(sent) > budget or sent[0] is transcript.opening[0]
            reached.note("nothing whole fits")

    one_request()
    reached.assert_all()


def selected_by_definition(
    messages: list[ChatMessage], budget: int, opening: list[ChatMessage] | None
) -> list[ChatMessage]:
    """Decision 8 read literally, every message of the window measured: what
    `select_context` must choose while measuring only what it sends."""
    if opening is None:
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        opening = [messages[users[-1]]] if users else []
    present = [i for i, m in enumerate(messages) if any(m is o for o in opening)]
    if opening and len(present) == len(opening):
        for start in range(present[0] + 1):
            if messages[start]["role"] == "user" and cost(messages[start:]) <= budget:
                return messages[start:]
    rounds_from = present[-1] + 1 if present else 0
    starts = [i for i in range(rounds_from, len(messages)) if messages[i]["role"] == "assistant"]
    for start in starts:
        if cost(messages[start:]) <= budget - cost(opening):
            return [*opening, *messages[start:]]
    return [*opening, *(messages[starts[-1] :] if starts else [])]


def test_only_the_messages_sent_are_measured_and_the_choice_is_the_definitions() -> None:
    reached = Reached("given opening", "last user message", "measured less than the window")

    @settings(max_examples=300)
    @given(transcript=transcripts(), budget=st.integers(-5, 20000), given_opening=st.booleans())
    def one_request(transcript: Transcript, budget: int, given_opening: bool) -> None:
        messages = transcript.messages
        opening = transcript.opening if given_opening else None
        measured: list[ChatMessage] = []

        def size_of(message: ChatMessage) -> int:
            measured.append(message)
            return message_size(message)

        sent = select_context(messages, budget, opening, size_of=size_of)
        assert sent == selected_by_definition(messages, budget, opening)
        # What is measured of the window is its newest messages, as far back as the budget
        # reaches and one more: never the whole window when only part of it fits.
        # (The opening is always sent, so it is measured wherever it is.)
        users = [m for m in messages if m["role"] == "user"]
        head = opening if opening is not None else users[-1:]
        rest = [m for m in messages if not any(m is h for h in head)]
        newest = [m for m in rest if any(m is n for n in measured)]
        assert newest == rest[len(rest) - len(newest) :]
        assert cost(newest[1:]) <= max(budget, 0)
        reached.note("given opening" if given_opening else "last user message")
        if len(newest) < len(rest):
            reached.note("measured less than the window")

    one_request()
    reached.assert_all()


def test_the_framing_is_kept_when_only_the_stimulus_would_fit() -> None:
    framing: ChatMessage = {"role": "user", "content": "Begin autonomous cycle 1. " + "x" * 400}
    stimulus: ChatMessage = {"role": "user", "content": "External observation: news"}
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    assistant: ChatMessage = {"role": "assistant", "content": "", "tool_calls": [call]}
    result: ChatMessage = {"role": "tool", "content": "ok", "tool_call_id": "c1", "name": "t"}
    messages = [framing, stimulus, assistant, result]
    budget = cost(messages[1:])  # the stimulus onwards fits, the framing onwards does not
    sent = select_context(messages, budget, [framing, stimulus])
    assert sent[:2] == [framing, stimulus]
    assert sent == [framing, stimulus, assistant, result]


def test_an_archived_opening_is_put_back_and_orphan_results_are_dropped() -> None:
    framing: ChatMessage = {"role": "user", "content": "Begin autonomous cycle 9."}
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        for i in range(3)
    ]
    orphan: ChatMessage = {"role": "tool", "content": "old", "tool_call_id": "c0", "name": "t"}
    assistant: ChatMessage = {"role": "assistant", "content": "", "tool_calls": calls[1:]}
    results: list[ChatMessage] = [
        {"role": "tool", "content": "new", "tool_call_id": f"c{i}", "name": "t"} for i in (1, 2)
    ]
    window = [orphan, assistant, *results]
    assert select_context(window, 10_000, [framing]) == [framing, assistant, *results]
    assert select_context([orphan], 10_000, [framing]) == [framing]


def test_without_an_opening_the_last_user_message_opens_the_cycle() -> None:
    old: ChatMessage = {"role": "user", "content": "Begin autonomous cycle 1."}
    reply: ChatMessage = {"role": "assistant", "content": "x" * 4000}
    current: ChatMessage = {"role": "user", "content": "Begin autonomous cycle 2."}
    assert select_context([old, reply, current], 100) == [current]
    assert select_context([old, reply, current], 10_000) == [old, reply, current]
    assert select_context([], 100) == []


# --- the live cycle: an opening archived by the window -------------------------------------


def test_a_cycle_whose_tool_results_overflow_the_window_still_sends_a_valid_request(
    tmp_path: Path,
) -> None:
    """Large tool results push the cycle's framing into `conversation.jsonl` mid-cycle."""
    blob = {"text": "word " * 12_000}  # 60 KB each, inside the boundary's 64 KiB

    async def big(arguments: dict[str, Any]) -> Outcome:
        return Outcome.success(blob)

    tool = FunctionTool(
        ToolDefinition("blob", "a large result", {"type": "object", "properties": {}}), big
    )
    rounds = [Turn.tool_calls(*[Call("blob", "{}")] * 4) for _ in range(6)]
    with ScriptedServer([*rounds, Turn.text("done")]) as server:

        async def go() -> None:
            runtime = boot(
                tmp_path,
                server,
                extra_toolsets=lambda being: [FunctionToolset([tool])],
                max_tool_rounds="8",
            )
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()

        asyncio.run(go())
        sent = [request.json["messages"] for request in server.completions]
    state = state_of(tmp_path)
    assert state.mind.conversation_archived > 0
    assert state.conversation[0]["role"] != "user"  # the framing left the window
    for messages in sent:
        assert messages[0]["role"] == "system"
        assert messages[1]["role"] == "user"
        assert messages[1]["content"].startswith("Begin autonomous cycle 1. ")
        seen: set[str] = set()
        for message in messages[2:]:
            assert message["role"] != "user"
            seen |= {call["id"] for call in message.get("tool_calls", [])}
            if message["role"] == "tool":
                assert message["tool_call_id"] in seen
        assert len(str(messages)) < 3 * 8192 * 4 + 500_000
