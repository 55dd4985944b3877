"""A being's life as a readable transcript: what it was told, said and did, and what it cost.

The conversation (archived messages first, then the window in `state.json`) gives the
words, the tool calls and their outcomes exactly as the model saw them; the activity
journal gives each round's cost and usage and each cycle's start time. Journal events
are always read after the state, and the journal is written before the state, so every
round on disk has its cost. `Transcript` is fed in order and can be fed more later
(`singularity log --follow`, the console's live tail).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from singularity.domain import events
from singularity.domain.operator import MESSAGE_PREFIX, OPERATOR_NAME
from singularity.domain.records import ChatMessage
from singularity.domain.state import AgentState
from singularity.jsoncodec import compact
from singularity.mind.framing import STIMULUS_PREFIX
from singularity.money import render_money
from singularity.storage.activity import Event
from singularity.storage.conversation_archive import read_archive
from singularity.store.directory import replay

FRAMING = re.compile(r"Begin autonomous cycle ([0-9]+)\. ")


@dataclass(frozen=True)
class Entry:
    """One line of the transcript."""

    kind: str
    """`cycle`, `framing`, `observation`, `operator`, `user`, `being`, `call`, `result`, `cost`."""
    cycle: int | None
    seq: int
    """The index of the message it comes from, counted from the being's first message."""
    text: str
    tool: str | None = None
    status: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The entry as one JSON object (absent fields omitted)."""
        document: dict[str, Any] = {"kind": self.kind, "cycle": self.cycle, "seq": self.seq}
        if self.tool is not None:
            document["tool"] = self.tool
        if self.status is not None:
            document["status"] = self.status
        document["text"] = self.text
        document.update(self.extra)
        return document


@dataclass(frozen=True)
class RoundCost:
    """What one model round cost and used."""

    amount: Decimal
    prompt_tokens: int
    completion_tokens: int


def framing_cycle(message: ChatMessage) -> int | None:
    """The cycle a framing message opens, or None for any other message."""
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, str):
        return None
    match = FRAMING.match(content)
    return int(match.group(1)) if match else None


def _text(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else compact(content)


class Transcript:
    """Turns messages and journal events into entries, keeping the context between feeds."""

    def __init__(self) -> None:
        self.cycle: int | None = None
        self.seq = 0
        self._costs: dict[int, deque[RoundCost]] = defaultdict(deque)
        self._usage: dict[int, tuple[int, int]] = {}
        self.started: dict[int, str] = {}
        self.finished: dict[int, str] = {}

    def add_events(self, journaled: Iterable[Event]) -> None:
        """Learn round costs and cycle times from journal events, in journal order (one it
        cannot read, it passes over)."""
        for event in journaled:
            record = events.readable(event)
            if isinstance(record, events.CycleStarted):
                self.started[record.cycle] = record.at
            elif isinstance(record, events.CycleFinished):
                self.finished[record.cycle] = record.status
            elif isinstance(record, events.ModelCompleted):
                usage = record.usage
                self._usage[record.cycle] = (usage.prompt_tokens, usage.completion_tokens)
            elif isinstance(record, events.CostDebited) and record.cycle in self._usage:
                prompt, completion = self._usage.pop(record.cycle)
                self._costs[record.cycle].append(RoundCost(record.amount, prompt, completion))

    def add_messages(self, messages: Iterable[ChatMessage]) -> list[Entry]:
        """The entries of the next messages."""
        entries: list[Entry] = []
        for message in messages:
            entries += self._entries(message, self.seq)
            self.seq += 1
        return entries

    def _entries(self, message: ChatMessage, seq: int) -> list[Entry]:
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            return self._user(message, seq)
        if role == "assistant":
            entries = []
            text = _text(content)
            if text:
                entries.append(Entry("being", self.cycle, seq, text))
            for call in message.get("tool_calls", []):
                function = call["function"]
                entries.append(
                    Entry("call", self.cycle, seq, function["arguments"], tool=function["name"])
                )
            queue = self._costs.get(self.cycle) if self.cycle is not None else None
            cost = queue.popleft() if queue else None
            if cost is not None:
                entries.append(
                    Entry(
                        "cost",
                        self.cycle,
                        seq,
                        f"{render_money(cost.amount)} USD",
                        extra={
                            "amount": render_money(cost.amount),
                            "prompt_tokens": cost.prompt_tokens,
                            "completion_tokens": cost.completion_tokens,
                        },
                    )
                )
            return entries
        if role == "tool":
            status, shown = _tool_result(_text(content))
            tool = message.get("name")
            return [Entry("result", self.cycle, seq, shown, tool=tool, status=status)]
        return [Entry("user", self.cycle, seq, _text(content))]

    def _user(self, message: ChatMessage, seq: int) -> list[Entry]:
        text = _text(message.get("content"))
        cycle = framing_cycle(message)
        if cycle is not None:
            self.cycle = cycle
            extra = {"at": self.started[cycle]} if cycle in self.started else {}
            return [
                Entry("cycle", cycle, seq, f"cycle {cycle}", extra=extra),
                Entry("framing", cycle, seq, text),
            ]
        if text.startswith(STIMULUS_PREFIX):
            return [Entry("observation", self.cycle, seq, text[len(STIMULUS_PREFIX) :])]
        if message.get("name") == OPERATOR_NAME:
            shown = text[len(MESSAGE_PREFIX) :] if text.startswith(MESSAGE_PREFIX) else text
            return [Entry("operator", self.cycle, seq, shown)]
        return [Entry("user", self.cycle, seq, text)]


def _tool_result(content: str) -> tuple[str | None, str]:
    """The status and the shown content of a tool message (spec §10.3's compact JSON)."""
    try:
        document = json.loads(content)
    except ValueError:
        return None, content
    if not isinstance(document, dict):
        return None, content
    status = document.get("status")
    shown = document.get("content") if "content" in document else document
    if document.get("error_code") and "content" not in document:
        shown = {"error_code": document["error_code"]}
    return (str(status) if status is not None else None), compact(shown)


def all_messages(dir_fd: int, state: AgentState, start: int = 0) -> list[ChatMessage]:
    """The being's messages from index `start`: archived ones, then the window."""
    archived = state.mind.conversation_archived
    messages: list[ChatMessage] = []
    if start < archived:
        held = read_archive(dir_fd)
        if len(held) < archived:
            held = _with_logged(dir_fd, held, archived)
        messages += held[start:archived]  # type: ignore[arg-type]
    messages += state.conversation[max(0, start - archived) :]
    return messages


def _with_logged(dir_fd: int, held: list[Any], archived: int) -> list[Any]:
    """The archive's messages with those only `state.redo` holds yet (a living being
    writes its archive in batches, `singularity.store.directory`)."""
    moved = replay(dir_fd).archived
    missing = range(len(held), archived)
    if all(index in moved for index in missing):
        return held + [moved[index] for index in missing]
    return read_archive(dir_fd)  # a checkpoint wrote them since the file was read


def transcript(messages: Sequence[ChatMessage], journaled: Iterable[Event]) -> list[Entry]:
    """The whole transcript of these messages."""
    builder = Transcript()
    builder.add_events(journaled)
    return builder.add_messages(messages)


def tail(
    messages: Sequence[ChatMessage], journaled: Iterable[Event], count: int, offset: int = 0
) -> list[Entry]:
    """The entries of the newest `count` messages (`messages[0]` has index `offset`), read
    with their cycle's context."""
    start = max(0, len(messages) - count)
    begin = start
    while begin > 0 and framing_cycle(messages[begin]) is None:
        begin -= 1
    builder = Transcript()
    builder.add_events(journaled)
    builder.seq = offset + begin
    entries = builder.add_messages(messages[begin:])
    return [entry for entry in entries if entry.seq >= offset + start]


def cycle_reply(messages: Sequence[ChatMessage], cycle: int) -> str | None:
    """The content of the being's last message in a cycle: its plain reply when the cycle
    completed; None when the cycle is not among the messages or the being said nothing."""
    current: int | None = None
    reply: str | None = None
    for message in messages:
        opened = framing_cycle(message)
        if opened is not None:
            current = opened
        elif current == cycle and message.get("role") == "assistant":
            reply = _text(message.get("content"))
    return reply
