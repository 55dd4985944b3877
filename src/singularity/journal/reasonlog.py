"""`reasonlog.jsonl`: the public, append-only, fsynced log of reasoning a being chose to share.

One compact JSON object per line: `id, timestamp, decision_context, step_index, thought,
relevance, risk, predicted_outcome, source` and, for a promoted reflection,
`journal_entry_id`. Readers skip a torn last line (a crash mid-append).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

from singularity.jsoncodec import compact
from singularity.storage import fsio

REASONLOG_FILE = "reasonlog.jsonl"
MAX_READ_BYTES = 1 << 30


def record(
    timestamp: str,
    thought: str,
    *,
    source: str,
    decision_context: str = "reflection",
    step_index: int = 0,
    relevance: float | None = None,
    risk: float | None = None,
    predicted_outcome: Any = None,
    journal_entry_id: str | None = None,
) -> dict[str, Any]:
    """A reasonlog line in its field order, with a new id."""
    entry: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "timestamp": timestamp,
        "decision_context": decision_context,
        "step_index": step_index,
        "thought": thought,
        "relevance": relevance,
        "risk": risk,
        "predicted_outcome": predicted_outcome,
        "source": source,
    }
    if journal_entry_id is not None:
        entry["journal_entry_id"] = journal_entry_id
    return entry


def append(dir_fd: int, entry: dict[str, Any]) -> None:
    """Append one line and fsync it before returning (0600, created on first use)."""
    fd = fsio.open_append(dir_fd, REASONLOG_FILE, "reasonlog")
    try:
        fsio.append_durably(fd, (compact(entry) + "\n").encode("utf-8"), "reasonlog")
    finally:
        os.close(fd)


def append_at(state_dir: str, entry: dict[str, Any]) -> None:
    """`append` into the state directory at this path."""
    dir_fd = fsio.open_dir(state_dir)
    try:
        append(dir_fd, entry)
    finally:
        os.close(dir_fd)


def read(state_dir: str) -> list[dict[str, Any]]:
    """Every complete entry, oldest first (missing file: none)."""
    try:
        dir_fd = fsio.open_dir(state_dir)
    except FileNotFoundError:
        return []
    try:
        data = fsio.read_at(dir_fd, REASONLOG_FILE, MAX_READ_BYTES)
    except FileNotFoundError:
        return []
    finally:
        os.close(dir_fd)
    entries = []
    for line in data.split(b"\n"):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries
