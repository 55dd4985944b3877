"""The journal's tools: write, recall and promote (private), and the public reasonlog append.

The three journal tools are private: the runtime saves their arguments and results as
`(private journal content omitted)`, under the real status, and journals only ids and
counts. A failure here is an outcome the being sees, never an exception, and never
carries journal text. Recall passes the being's output boundary entry by entry.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from singularity.domain import events
from singularity.domain.records import MemoryEntry
from singularity.journal import reasonlog, redaction
from singularity.journal.records import (
    DEFAULT_RECALL_K,
    MAX_ENTRY_BYTES,
    MAX_QUERY_BYTES,
    MAX_RECALL_K,
    MAX_SUMMARY_BYTES,
    MOOD,
    THREAD,
    JournalError,
)
from singularity.journal.service import CapReached, Journal, Recalled
from singularity.jsoncodec import compact
from singularity.secrets import os_error_text
from singularity.timestamps import render_timestamp
from singularity.tools.arguments import RANGE, Choice, Fraction, Integer, Pattern, Prose, Timestamp
from singularity.tools.base import FunctionToolset, Outcome
from singularity.tools.boundary import MAX_OUTPUT_BYTES
from singularity.tools.extension import BeingHandle
from singularity.tools.output_boundary import OutputBoundary
from singularity.tools.typed import tool, toolset

TARGETS = ("reasonlog", "learning", "memory")
# Room in one result for the wrapper, `unreadable`, `left_out` and its message.
RESULT_OVERHEAD_BYTES = 512
MAX_DECISION_CONTEXT_BYTES = 128
MAX_STEP_INDEX = 1_000_000
ENTRY_HINT = (
    f": a journal entry holds at most {MAX_ENTRY_BYTES} bytes; split a longer idea into "
    "several entries that share one thread_id"
)
Mood = Annotated[str | None, Pattern(MOOD)]
Thread = Annotated[str | None, Pattern(THREAD)]
Summary = Annotated[str, Prose(MAX_SUMMARY_BYTES)]


@dataclass(frozen=True)
class JournalTools:
    """What the journal's tools act on. Recalled texts pass `boundary` (the being's own)
    one entry at a time; `settle` runs after each call that reached the journal (it
    journals a salvage); `on_write` after each entry written."""

    being: BeingHandle
    state_dir: str
    open_journal: Callable[[], Journal]
    on_write: Callable[[], None]
    boundary: OutputBoundary
    settle: Callable[[], None]

    def emit(self, event: events.ActivityEvent) -> None:
        """Journal an event (ids and counts only, never journal text)."""
        self.being.journal(event)

    def append_reasonlog(self, line: dict[str, Any]) -> Outcome | None:
        """Append a line to the public reasonlog; the failure, if it cannot."""
        try:
            reasonlog.append_at(self.state_dir, line)
        except OSError as error:
            return Outcome.failed("reasonlog_unwritable", os_error_text(error))
        return None


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


@tool(
    "singularity_journal_write",
    "Write a candid reflection to your sealed private journal: encrypted, never shown to "
    "people, recallable by meaning, gone after the retention window. At most 4096 bytes "
    "per entry (chunk longer ideas with one thread_id); no secrets or personal data.",
    private=True,
)
async def write(
    tools: JournalTools,
    *,
    text: Annotated[str, Prose(MAX_ENTRY_BYTES, "entry_too_long", ENTRY_HINT)],
    mood: Mood = None,
    thread_id: Thread = None,
) -> Outcome:
    being = tools.being
    try:
        written = tools.open_journal().write(text, mood, thread_id)
    except CapReached as error:
        return Outcome.failed("journal_daily_cap", error.message)
    except JournalError as error:
        return Outcome.failed("journal_unavailable", error.message)
    finally:
        tools.settle()
    tools.emit(
        events.JournalEntryAdded(
            being.now(), being.state.cycle, written.entry_id, mood, written.redacted
        )
    )
    tools.on_write()
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


@tool(
    "singularity_journal_recall",
    "Recall your own journal entries closest in meaning to a query (k 1-20, default 5).",
    private=True,
)
async def recall(
    tools: JournalTools,
    *,
    query: Annotated[str, Prose(MAX_QUERY_BYTES)],
    k: Annotated[int, Integer(1, MAX_RECALL_K, message=RANGE)] = DEFAULT_RECALL_K,
    since: Annotated[datetime | None, Timestamp()] = None,
    mood: Mood = None,
    thread_id: Thread = None,
) -> Outcome:
    being = tools.being
    try:
        found, failed = tools.open_journal().recall(query, k, since, mood, thread_id)
    except JournalError as error:
        return Outcome.failed("journal_unavailable", error.message)
    finally:
        tools.settle()
    tools.emit(
        events.JournalRecalled(being.now(), being.state.cycle, k, [hit.entry_id for hit in found])
    )
    entries, left_out = bounded_entries(found, tools.boundary)
    result: dict[str, Any] = {"entries": entries, "unreadable": failed}
    if left_out:
        result["left_out"] = left_out
        result["message"] = (
            f"{left_out} more entr{'y' if left_out == 1 else 'ies'} did not fit in one "
            "result; ask for fewer (k) or narrow the query"
        )
    return Outcome.success(result)


@tool(
    "singularity_journal_promote",
    "Publish a summary of a journal entry, never its private text, to the public "
    "reasonlog (default), your learnings, or your memories (kind `reflection`).",
    private=True,
)
async def promote(
    tools: JournalTools,
    *,
    entry_id: Annotated[str, Prose(64)],
    summary: Summary,
    target: Annotated[
        str, Choice(TARGETS, "target must be reasonlog, learning or memory")
    ] = "reasonlog",
) -> Outcome:
    being = tools.being
    tripped = redaction.scan(summary)
    if tripped:
        return Outcome.failed(
            "summary_redacted",
            "the summary holds " + ", ".join(tripped) + "; nothing was published",
        )
    try:
        journal = tools.open_journal()
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
        unwritable = tools.append_reasonlog(line)
        if unwritable is not None:
            return unwritable
        ref = f"reasonlog:{line['id']}"
    elif target == "learning":
        being.state.mind.learnings.append(summary)
        ref = f"learning:{len(being.state.mind.learnings) - 1}"
    else:
        memory_id = str(uuid.uuid4())
        being.state.mind.remember(
            MemoryEntry(id=memory_id, kind="reflection", text=summary, created_at=now, sources=[])
        )
        ref = f"memory:{memory_id}"
    try:
        journal.mark_promoted(row, ref)
    except JournalError as error:
        return Outcome.failed("journal_unavailable", error.message)
    tools.emit(events.JournalPromoted(now, being.state.cycle, entry_id, target, ref))
    return Outcome.success({"entry_id": entry_id, "target": target, "ref": ref})


@tool(
    "singularity_reasonlog_append",
    "Add a step of your reasoning to the public reasonlog (people can read it).",
)
async def append_reasoning(
    tools: JournalTools,
    *,
    thought: Summary,
    decision_context: Annotated[str | None, Prose(MAX_DECISION_CONTEXT_BYTES)] = None,
    step_index: Annotated[int, Integer(0, limit=MAX_STEP_INDEX, message=RANGE)] = 0,
    relevance: Annotated[float | None, Fraction()] = None,
    risk: Annotated[float | None, Fraction()] = None,
) -> Outcome:
    tripped = redaction.scan(thought)
    if tripped:
        return Outcome.failed("thought_redacted", "the thought holds " + ", ".join(tripped))
    line = reasonlog.record(
        tools.being.now(),
        thought,
        source="being",
        decision_context=decision_context or "reasoning",
        step_index=step_index,
        relevance=relevance,
        risk=risk,
    )
    unwritable = tools.append_reasonlog(line)
    return unwritable or Outcome.success({"id": line["id"]})


JOURNAL_TOOLS = (write, recall, promote, append_reasoning)
"""The journal's tools, in catalogue order."""
DEFINITIONS = tuple(each.definition for each in JOURNAL_TOOLS)


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
    context = JournalTools(being, state_dir, open_journal, on_write, boundary, settle)
    return toolset(context, JOURNAL_TOOLS)
