"""The bounded conversation window and its archive (decision 8).

Contract: `state.json` keeps at most the newest 400 messages or 1 MiB of them (whichever
is smaller; the newest message always stays); a message leaving the window is first
appended to `conversation.jsonl` as `{"seq": n, "message": …}`, so every message the
being ever had is in exactly one of the two, in order, with `seq` counting from 0; what
a round sends stays within the context budget however long the being lives; and a crash
that cut an archive append short is repaired at the next open (extra lines are cut,
lines a logged step moved are written back from `state.redo`), while an archive shorter
than the checkpoint says refuses to open.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.domain.records import ChatMessage, ToolCall
from singularity.errors import FatalIoError, StateError
from singularity.jsoncodec import compact
from singularity.mind.context import estimate_tokens, select_context
from singularity.runtime.being import WINDOW_BYTES, WINDOW_MESSAGES, LiveBeing, open_being
from singularity.runtime.inspect.verify import inspect_state_dir
from singularity.runtime.loop.tool_call import execute_tool_call
from singularity.runtime.talk.transcript import all_messages
from singularity.storage import fsio
from singularity.store.directory import DirectoryStore, peek_state
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from singularity.tools.base import FunctionTool, FunctionToolset, Outcome, ToolDefinition
from singularity.tools.catalogue import Catalogue
from singularity.tools.output_boundary import STRICT
from tests.support.loop_http import boot, state_of

CONTEXT_TOKENS = 8192
ROUNDS_PER_CYCLE = 8


@pytest.fixture
def root() -> Iterator[Path]:
    """A scratch directory on tmpfs when there is one: thousands of saves stay fast."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(dir=base) as path:
        yield Path(path)


def open_at(root: Path, *, resume: bool) -> LiveBeing:
    settings = resolve({"state_dir": str(root / "being")}, environ={})
    return open_being(settings, resume=resume)


def archive_lines(root: Path) -> list[dict[str, Any]]:
    path = root / "being" / "conversation.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def everything(being: LiveBeing) -> list[Any]:
    """The archive (the file's lines, then those the store holds back), then the window:
    the whole conversation as plain JSON values."""
    window = json.loads(compact(being.state.conversation))
    return json.loads(compact(being.store.archived())) + window


def assert_exactly_once(root: Path, being: LiveBeing, expected: list[Any]) -> None:
    lines = archive_lines(root)
    assert [line["seq"] for line in lines] == list(range(len(lines)))
    assert len(being.store.archived()) == being.state.mind.conversation_archived
    assert [line["message"] for line in lines] == being.store.archived()[: len(lines)]
    assert everything(being) == expected


def writes_each_step(being: LiveBeing) -> None:
    """Make the being's store write each step's archive lines, not batches of them."""
    assert isinstance(being.store, DirectoryStore)
    being.store.archive_batch = 0


class Life:
    """A being living rounds directly: framing every few rounds, one tool call a round."""

    def __init__(self, root: Path, being: LiveBeing) -> None:
        self.root = root
        self.being = being
        self.expected: list[Any] = []
        self.opening: list[ChatMessage] = []
        self.number = 0
        self.big_text = ""

        async def echo(arguments: dict[str, Any]) -> Outcome:
            return Outcome.success({"echo": arguments.get("text", ""), "big": self.big_text})

        definition = ToolDefinition("echo", "echo", {"type": "object", "properties": {}})
        self.catalogue = Catalogue(
            [FunctionToolset([FunctionTool(definition, echo)])], boundary=STRICT
        )

    def append(self, message: ChatMessage) -> None:
        self.being.state.conversation.append(message)
        self.expected.append(json.loads(compact(message)))

    async def round(self) -> None:
        if self.number % ROUNDS_PER_CYCLE == 0:
            self.being.state.cycle += 1
            framing: ChatMessage = {
                "role": "user",
                "content": f"Begin autonomous cycle {self.being.state.cycle}. zażółć",
            }
            self.opening = [framing]
            self.append(framing)
        self.number += 1
        call: ToolCall = {
            "id": f"call_{self.number}",
            "type": "function",
            "function": {"name": "echo", "arguments": json.dumps({"text": f"r{self.number}"})},
        }
        self.append({"role": "assistant", "content": "", "tool_calls": [call]})
        await execute_tool_call(self.being, self.catalogue, call)
        self.expected.append(json.loads(compact(self.being.state.conversation[-1])))

    def check_bounds(self) -> None:
        state = self.being.state
        window = state.conversation
        assert len(window) <= WINDOW_MESSAGES
        window_bytes = sum(len(compact(m).encode()) for m in window)
        assert window_bytes <= WINDOW_BYTES or len(window) == 1
        on_disk = (self.root / "being" / "state.json").stat().st_size
        mind = len(state.mind.model_dump_json(indent=2))
        # Pretty printing adds indentation to each message: a few hundred bytes at most.
        assert on_disk <= WINDOW_BYTES + mind + 300 * len(window) + 16_384
        sent = select_context(window, CONTEXT_TOKENS, self.opening)
        tokens = sum(estimate_tokens(m) for m in sent)
        newest = max(i for i, m in enumerate(window) if m["role"] == "assistant")
        assert tokens <= CONTEXT_TOKENS or sent == self.opening + list(window[newest:])
        assert sent[0]["role"] == "user"


def live_rounds(root: Path, rounds: int, *, reopen_at: int | None = None) -> None:
    being = open_at(root, resume=False)
    being.save()
    life = Life(root, being)

    async def go() -> None:
        for index in range(rounds):
            if index == reopen_at:
                life.being.close()
                life.being = open_at(root, resume=True)
                assert_exactly_once(root, life.being, life.expected)
            # A stretch of large results pushes the byte limit instead of the count.
            big = rounds // 2 <= index < rounds // 2 + 24
            life.big_text = "big " * 15_000 if big else ""  # 60 KB: inside the boundary
            await life.round()
            if index % 97 == 0 or index == rounds - 1:
                life.check_bounds()

    try:
        asyncio.run(go())
        assert life.being.state.mind.conversation_archived > 0
        assert_exactly_once(root, life.being, life.expected)
    finally:
        life.being.close()
    reopened = open_at(root, resume=True)
    try:
        assert_exactly_once(root, reopened, life.expected)
    finally:
        reopened.close()


@pytest.mark.timeout(600)
def test_a_being_living_two_thousand_rounds_stays_bounded(root: Path) -> None:
    live_rounds(root, 2_000, reopen_at=1_201)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_a_being_living_a_hundred_thousand_rounds_stays_bounded(root: Path) -> None:
    live_rounds(root, 100_000, reopen_at=55_555)


def test_the_byte_limit_keeps_the_newest_message_even_when_it_alone_is_too_big(
    root: Path,
) -> None:
    being = open_at(root, resume=False)
    try:
        being.window_bytes = 1000
        for index in range(5):
            being.state.conversation.append({"role": "user", "content": f"{index} " + "x" * 600})
            being.save()
        assert [m["content"][0] for m in being.state.conversation] == ["4"]
        assert being.state.mind.conversation_archived == 4
        assert [m["content"][0] for m in being.store.archived()] == list("0123")
    finally:
        being.close()


def _grow(being: LiveBeing, count: int, start: int = 0) -> list[Any]:
    messages = []
    for index in range(start, start + count):
        message: ChatMessage = {"role": "user", "content": f"message {index}"}
        being.state.conversation.append(message)
        messages.append(json.loads(compact(message)))
    return messages


def test_duplicate_archive_lines_left_by_a_crash_are_cut_at_open(root: Path) -> None:
    being = open_at(root, resume=False)
    being.window_messages = 10
    writes_each_step(being)
    expected = _grow(being, 25)
    being.save()
    being.close()
    path = root / "being" / "conversation.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 15
    # The archive append of a save that never finished: its lines repeat, then a torn tail.
    path.write_bytes(b"".join(lines) + b"".join(lines[-4:]) + lines[0][:7])
    reopened = open_at(root, resume=True)
    try:
        assert_exactly_once(root, reopened, expected)
    finally:
        reopened.close()


def test_a_step_whose_archive_write_failed_never_became_durable(root: Path) -> None:
    being = open_at(root, resume=False)
    being.window_messages = 10
    writes_each_step(being)
    expected = _grow(being, 12)
    being.save()
    assert len(archive_lines(root)) == 2
    _grow(being, 7, start=12)
    fsio.arm_failpoints("archive.write=eio")
    try:
        with pytest.raises(FatalIoError, match=r"cannot append to conversation\.jsonl"):
            being.save()
    finally:
        fsio.arm_failpoints("")
        being.close()
    # A step writes its archive lines before its record: this one was never logged.
    assert len(archive_lines(root)) == 2
    reopened = open_at(root, resume=True)
    try:
        assert_exactly_once(root, reopened, expected)
        later = _grow(reopened, 7, start=12)  # the being lives on from what was saved
        reopened.save()
        assert_exactly_once(root, reopened, expected + later)
    finally:
        reopened.close()


def test_archive_lines_of_a_step_whose_record_failed_are_cut_at_the_next_open(
    root: Path,
) -> None:
    being = open_at(root, resume=False)
    being.window_messages = 10
    writes_each_step(being)
    expected = _grow(being, 12)
    being.save()
    _grow(being, 7, start=12)
    fsio.arm_failpoints("redo.write=eio")
    try:
        with pytest.raises(FatalIoError, match=r"cannot append to state\.redo"):
            being.save()
    finally:
        fsio.arm_failpoints("")
        being.close()
    assert len(archive_lines(root)) == 9  # written before the record, which never was
    reopened = open_at(root, resume=True)
    try:
        assert_exactly_once(root, reopened, expected)
        assert len(archive_lines(root)) == 2
    finally:
        reopened.close()


def test_a_living_beings_archive_is_written_in_batches_and_read_with_its_log(
    root: Path,
) -> None:
    being = open_at(root, resume=False)
    path = root / "being"
    try:
        being.window_messages = 10
        expected: list[Any] = []
        for start in range(0, 40, 4):
            expected += _grow(being, 4, start=start)
            being.save()
        assert archive_lines(root) == []  # held back: the log holds them
        state = peek_state(str(path))
        assert state is not None and state.mind.conversation_archived == 30
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert json.loads(compact(all_messages(dir_fd, state))) == expected
        finally:
            os.close(dir_fd)
        found = inspect_state_dir(str(path))
        assert not [w for w in found.problems + found.warnings if "conversation" in w]
    finally:
        being.close()  # no checkpoint: as a kill leaves it
    assert [p for p in inspect_state_dir(str(path)).problems if "conversation" in p] == [
        "conversation.jsonl lacks 30 message(s) state.redo archived "
        "(the next boot writes them back)"
    ]
    reopened = open_at(root, resume=True)
    try:
        assert len(archive_lines(root)) == 30
        assert_exactly_once(root, reopened, expected)
    finally:
        reopened.close()


def test_an_archive_missing_lines_refuses_to_open(root: Path) -> None:
    being = open_at(root, resume=False)
    being.window_messages = 5
    _grow(being, 12)
    being.checkpoint()  # state.json alone says what was archived: no log to write it back
    being.close()
    path = root / "being" / "conversation.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))
    with pytest.raises(StateError, match=r"conversation\.jsonl holds 6 messages but the state"):
        open_at(root, resume=True)


def test_a_round_larger_than_the_window_is_kept_and_sent_whole(root: Path) -> None:
    # One answer with 405 tool calls: the round (its assistant message and 405 results)
    # overflows the 400-message window; the next request still carries all of it.
    calls = [Call("singularity_memory_recall", '{"query":"q"}', f"call_{n}") for n in range(405)]
    script = [Turn.tool_calls(*calls), Turn.text("done")]
    with ScriptedServer(script) as server:

        async def go() -> None:
            runtime = boot(root, server)
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()

        asyncio.run(go())
        second = server.completions[1].json["messages"]
    assert [m["role"] for m in second[:3]] == ["system", "user", "assistant"]
    assert second[1]["content"].startswith("Begin autonomous cycle 1. Balance: 10 USD.")
    assert [c["id"] for c in second[2]["tool_calls"]] == [f"call_{n}" for n in range(405)]
    assert [(m["role"], m["tool_call_id"]) for m in second[3:]] == [
        ("tool", f"call_{n}") for n in range(405)
    ]
    assert json.loads(second[3]["content"]) == {
        "chat_id": None,
        "content": {"memories": []},
        "error_code": None,
        "message_id": None,
        "status": "success",
    }
    # Once the cycle is over the window is bounded again, and nothing was lost.
    state = state_of(root)
    assert len(state.conversation) == WINDOW_MESSAGES
    everything = [line["message"] for line in archive_lines(root)] + [
        json.loads(compact(m)) for m in state.conversation
    ]
    assert [m["role"] for m in everything] == ["user", "assistant", *["tool"] * 405, "assistant"]
