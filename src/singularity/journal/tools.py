"""The journal's tools: write, recall and promote (private), and the public reasonlog append.

The three journal tools are private: the runtime saves their arguments and results as
`(private journal content omitted)`, under the real status, and journals only ids and
counts. A failure here is an outcome the being sees, never an exception, and never
carries journal text. Recall passes the being's output boundary entry by entry.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from singularity.domain import events
from singularity.domain.records import MemoryEntry
from singularity.journal import reasonlog, redaction
from singularity.journal.records import (
    DEFAULT_RECALL_K,
    MAX_ENTRY_BYTES,
    MAX_QUERY_BYTES,
    MAX_RECALL_K,
    MAX_SUMMARY_BYTES,
    JournalError,
)
from singularity.journal.service import CapReached, Journal, Recalled
from singularity.jsoncodec import compact
from singularity.secrets import os_error_text
from singularity.text import trim, utf8_length
from singularity.timestamps import parse_timestamp, render_timestamp
from singularity.tools.base import (
    FunctionTool,
    FunctionToolset,
    JsonObject,
    Outcome,
    ToolArgumentError,
    ToolDefinition,
    object_schema,
)
from singularity.tools.boundary import MAX_OUTPUT_BYTES
from singularity.tools.extension import BeingHandle
from singularity.tools.output_boundary import OutputBoundary

MOOD = re.compile(r"[a-z][a-z0-9-]{0,31}")
THREAD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
TARGETS = ("reasonlog", "learning", "memory")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_STRING = {"type": "string"}
# Room in one result for the wrapper, `unreadable`, `left_out` and its message.
RESULT_OVERHEAD_BYTES = 512

WRITE = ToolDefinition(
    "singularity_journal_write",
    "Write a candid reflection to your sealed private journal: encrypted, never shown to "
    "people, recallable by meaning, gone after the retention window. At most 4096 bytes "
    "per entry (chunk longer ideas with one thread_id); no secrets or personal data.",
    object_schema({"text": _STRING, "mood": _STRING, "thread_id": _STRING}, required=["text"]),
    private=True,
)
RECALL = ToolDefinition(
    "singularity_journal_recall",
    "Recall your own journal entries closest in meaning to a query (k 1-20, default 5).",
    object_schema(
        {
            "query": _STRING,
            "k": {"type": "integer", "minimum": 1, "maximum": MAX_RECALL_K},
            "since": _STRING,
            "mood": _STRING,
            "thread_id": _STRING,
        },
        required=["query"],
    ),
    private=True,
)
PROMOTE = ToolDefinition(
    "singularity_journal_promote",
    "Publish a summary of a journal entry, never its private text, to the public "
    "reasonlog (default), your learnings, or your memories (kind `reflection`).",
    object_schema(
        {
            "entry_id": _STRING,
            "summary": _STRING,
            "target": {"type": "string", "enum": list(TARGETS)},
        },
        required=["entry_id", "summary"],
    ),
    private=True,
)
REASONLOG_APPEND = ToolDefinition(
    "singularity_reasonlog_append",
    "Add a step of your reasoning to the public reasonlog (people can read it).",
    object_schema(
        {
            "thought": _STRING,
            "decision_context": _STRING,
            "step_index": {"type": "integer", "minimum": 0},
            "relevance": {"type": "number", "minimum": 0, "maximum": 1},
            "risk": {"type": "number", "minimum": 0, "maximum": 1},
        },
        required=["thought"],
    ),
)


DEFINITIONS = (WRITE, RECALL, PROMOTE, REASONLOG_APPEND)
"""The journal's tools, in catalogue order."""


def _text(arguments: JsonObject, key: str, limit: int, *, required: bool = True) -> str | None:
    value = arguments.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ToolArgumentError(f"{key} is invalid")
    text = trim(value)
    size = utf8_length(text)
    if not text or size is None or _CONTROL.search(text):
        raise ToolArgumentError(f"{key} is invalid")
    if size > limit:
        raise ToolArgumentError(f"{key} is {size} bytes; at most {limit} are allowed", "too_long")
    return text


def _pattern(arguments: JsonObject, key: str, pattern: re.Pattern[str]) -> str | None:
    value = arguments.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ToolArgumentError(f"{key} is invalid")
    return value


def _integer(arguments: JsonObject, key: str, default: int, low: int, high: int) -> int:
    value = arguments.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ToolArgumentError(f"{key} must be an integer from {low} to {high}")
    return value


def _fraction(arguments: JsonObject, key: str) -> float | None:
    value = arguments.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ToolArgumentError(f"{key} must be a number from 0 to 1")
    return round(float(value), 2)


def _since(arguments: JsonObject) -> datetime | None:
    value = arguments.get("since")
    if value is None:
        return None
    try:
        return parse_timestamp(value) if isinstance(value, str) else None
    except ValueError:
        raise ToolArgumentError("since must be an RFC 3339 timestamp") from None


def recalled_entry(hit: Recalled, boundary: OutputBoundary) -> dict[str, Any]:
    """One recall hit as the being sees it, its text through the being's output boundary:
    redacted where it must be, or, when refused, withheld with only its metadata kept."""
    entry: dict[str, Any] = {
        "entry_id": hit.entry_id,
        "timestamp": render_timestamp(hit.created_at),
        "mood": hit.mood,
        "thread_id": hit.thread_id,
        "seq": hit.seq,
        "score": None if hit.score is None else round(hit.score, 4),
        "text": None,
    }
    # Checked where the text sits in the result (content, entries, [i], text): an embedded
    # JSON value's depth counts from there, so no entry that passes here fails the result.
    bounded = boundary.apply({"entries": [{"text": hit.text}]})
    if bounded.rejection is not None:
        entry["withheld"] = f"the output boundary refused this entry's text: {bounded.rejection}"
        return entry
    entry["text"] = bounded.content["entries"][0]["text"]
    if bounded.redactions:
        entry["redacted"] = {"count": bounded.redacted, "reasons": dict(bounded.redactions)}
    return entry


def bounded_entries(
    found: list[Recalled], boundary: OutputBoundary
) -> tuple[list[dict[str, Any]], int]:
    """The hits that fit one tool result, best first, and how many were left out."""
    entries: list[dict[str, Any]] = []
    size = RESULT_OVERHEAD_BYTES
    for position, hit in enumerate(found):
        entry = recalled_entry(hit, boundary)
        size += len(compact(entry).encode("utf-8")) + 1
        if size > MAX_OUTPUT_BYTES:
            return entries, len(found) - position
        entries.append(entry)
    return entries, 0


def journal_tools(
    being: BeingHandle,
    state_dir: str,
    open_journal: Callable[[], Journal],
    on_write: Callable[[], None],
    boundary: OutputBoundary,
    settle: Callable[[], None] = lambda: None,
) -> FunctionToolset:
    """The four tools, on the journal `open_journal` gives; events carry ids and counts only.
    Recalled texts pass `boundary` (the being's own) one entry at a time.

    `settle` runs after each call that reached the journal (it journals a salvage).
    """

    def emit(event: dict[str, Any]) -> None:
        being.journal(event)

    async def write(arguments: JsonObject) -> Outcome:
        try:
            text = _text(arguments, "text", MAX_ENTRY_BYTES)
        except ToolArgumentError as error:
            if error.error_code != "too_long":
                raise
            raise ToolArgumentError(
                f"{error.message}: a journal entry holds at most {MAX_ENTRY_BYTES} bytes; split "
                "a longer idea into several entries that share one thread_id",
                "entry_too_long",
            ) from None
        mood = _pattern(arguments, "mood", MOOD)
        thread = _pattern(arguments, "thread_id", THREAD)
        assert text is not None
        try:
            written = open_journal().write(text, mood, thread)
        except CapReached as error:
            return Outcome.failed("journal_daily_cap", error.message)
        except JournalError as error:
            return Outcome.failed("journal_unavailable", error.message)
        finally:
            settle()
        emit(
            events.journal_entry_added(
                being.now(), being.state.cycle, written.entry_id, mood, written.redacted
            )
        )
        on_write()
        result: dict[str, Any] = {"entry_id": written.entry_id, "redacted": written.redacted}
        if written.seq is not None:
            result["seq"] = written.seq
        if written.redacted:
            result["categories"] = written.categories
            result["message"] = (
                "the entry was stored blank because it held: "
                + ", ".join(written.categories)
                + "; write it again without them"
            )
        return Outcome.success(result)

    async def recall(arguments: JsonObject) -> Outcome:
        query = _text(arguments, "query", MAX_QUERY_BYTES)
        assert query is not None
        k = _integer(arguments, "k", DEFAULT_RECALL_K, 1, MAX_RECALL_K)
        since = _since(arguments)
        mood = _pattern(arguments, "mood", MOOD)
        thread = _pattern(arguments, "thread_id", THREAD)
        try:
            found, failed = open_journal().recall(query, k, since, mood, thread)
        except JournalError as error:
            return Outcome.failed("journal_unavailable", error.message)
        finally:
            settle()
        emit(
            events.journal_recalled(
                being.now(), being.state.cycle, k, [hit.entry_id for hit in found]
            )
        )
        entries, left_out = bounded_entries(found, boundary)
        result: dict[str, Any] = {"entries": entries, "unreadable": failed}
        if left_out:
            result["left_out"] = left_out
            result["message"] = (
                f"{left_out} more entr{'y' if left_out == 1 else 'ies'} did not fit in one "
                "result; ask for fewer (k) or narrow the query"
            )
        return Outcome.success(result)

    async def promote(arguments: JsonObject) -> Outcome:
        entry_id = _text(arguments, "entry_id", 64)
        summary = _text(arguments, "summary", MAX_SUMMARY_BYTES)
        assert entry_id is not None and summary is not None
        target = arguments.get("target", "reasonlog")
        if target not in TARGETS:
            raise ToolArgumentError("target must be reasonlog, learning or memory")
        tripped = redaction.scan(summary)
        if tripped:
            return Outcome.failed(
                "summary_redacted",
                "the summary holds " + ", ".join(tripped) + "; nothing was published",
            )
        try:
            journal = open_journal()
            uuid.UUID(entry_id)
            row = journal.entry(entry_id)
        except ValueError:
            row = None
        except JournalError as error:
            return Outcome.failed("journal_unavailable", error.message)
        if row is None or row.redacted:
            return Outcome.failed("unknown_entry", "no unexpired, unblanked entry has this id")
        now = being.now()
        if target == "reasonlog":
            line = reasonlog.record(now, summary, source="journal", journal_entry_id=entry_id)
            try:
                reasonlog.append_at(state_dir, line)
            except OSError as error:
                return Outcome.failed("reasonlog_unwritable", os_error_text(error))
            ref = f"reasonlog:{line['id']}"
        elif target == "learning":
            being.state.mind.learnings.append(summary)
            ref = f"learning:{len(being.state.mind.learnings) - 1}"
        else:
            memory_id = str(uuid.uuid4())
            being.state.mind.remember(
                MemoryEntry(
                    id=memory_id, kind="reflection", text=summary, created_at=now, sources=[]
                )
            )
            ref = f"memory:{memory_id}"
        try:
            journal.mark_promoted(row, ref)
        except JournalError as error:
            return Outcome.failed("journal_unavailable", error.message)
        emit(events.journal_promoted(now, being.state.cycle, entry_id, target, ref))
        return Outcome.success({"entry_id": entry_id, "target": target, "ref": ref})

    async def append_reasoning(arguments: JsonObject) -> Outcome:
        thought = _text(arguments, "thought", MAX_SUMMARY_BYTES)
        context = _text(arguments, "decision_context", 128, required=False) or "reasoning"
        assert thought is not None
        tripped = redaction.scan(thought)
        if tripped:
            return Outcome.failed("thought_redacted", "the thought holds " + ", ".join(tripped))
        line = reasonlog.record(
            being.now(),
            thought,
            source="being",
            decision_context=context,
            step_index=_integer(arguments, "step_index", 0, 0, 1_000_000),
            relevance=_fraction(arguments, "relevance"),
            risk=_fraction(arguments, "risk"),
        )
        try:
            reasonlog.append_at(state_dir, line)
        except OSError as error:
            return Outcome.failed("reasonlog_unwritable", os_error_text(error))
        return Outcome.success({"id": line["id"]})

    return FunctionToolset(
        [
            FunctionTool(WRITE, write),
            FunctionTool(RECALL, recall),
            FunctionTool(PROMOTE, promote),
            FunctionTool(REASONLOG_APPEND, append_reasoning),
        ]
    )
