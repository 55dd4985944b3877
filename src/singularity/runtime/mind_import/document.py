"""Mind import (spec §15): validate a `singularity-mind-import-v1` document, then merge it.

Validation covers the whole document before anything changes. The merge is planned on
a copy of the memories and applied only when nothing conflicts or overflows.
"""

from __future__ import annotations

import os
import stat
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from singularity.domain import events
from singularity.domain.mind import MAX_MEMORIES
from singularity.domain.records import MemoryEntry, Source
from singularity.domain.state import AgentState
from singularity.errors import StateError
from singularity.jsoncodec import loads_strict
from singularity.secrets import os_error_text
from singularity.text import has_control, trim, utf8_length

IMPORT_SCHEMA = "singularity-mind-import-v1"
MAX_IMPORT_BYTES = 16 * 1024 * 1024
MAX_IMPORT_ITEMS = 1000
MAX_LABEL_BYTES = 256
MAX_ITEM_TEXT_BYTES = 65536
CATEGORIES = (("memories", "memory"), ("knowledge", "knowledge"), ("profile", "profile"))
CONFLICT_REASON = "source item was imported before with different content"
OVERFLOW_REASON = "import would exceed the 1000-memory state limit"


@dataclass(frozen=True)
class ImportItem:
    """One item to import: its category (the memory kind), trimmed id and text."""

    category: str
    item_id: str
    text: str


@dataclass(frozen=True)
class ImportDocument:
    """A validated import document."""

    source_kind: str
    source_id: str
    items: list[ImportItem]


@dataclass
class ImportReport:
    """What a merge did (spec §15.4)."""

    accepted: bool
    source_kind: str
    source_id: str
    imported: int = 0
    attributed: int = 0
    unchanged: int = 0
    conflicting: int = 0
    rejected: int = 0
    issues: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The report: its fields, in order."""
        return asdict(self)

    def event(self, at: str) -> events.MindImported:
        """The `mind_imported` event of an accepted import."""
        return events.MindImported(
            at, self.source_kind, self.source_id, self.imported, self.attributed, self.unchanged
        )


def read_import_file(path: str) -> bytes:
    """Read an import file: a regular file, not a symlink, at most 16 MiB."""
    try:
        info = os.lstat(path)
    except OSError as error:
        raise StateError(f"cannot inspect import file {path}: {os_error_text(error)}") from None
    if not stat.S_ISREG(info.st_mode):
        raise StateError(f"import file must be a regular file and not a symlink: {path}")
    if info.st_size > MAX_IMPORT_BYTES:
        raise StateError(f"import file exceeds {MAX_IMPORT_BYTES} bytes")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_IMPORT_BYTES + 1)
    except OSError as error:
        raise StateError(f"cannot inspect import file {path}: {os_error_text(error)}") from None
    if len(data) > MAX_IMPORT_BYTES:
        raise StateError(f"import file exceeds {MAX_IMPORT_BYTES} bytes")
    return data


def _shape_error(detail: str) -> StateError:
    return StateError(f"invalid Singularity import: {detail}")


def _object(value: object, where: str, keys: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _shape_error(f"{where} must be an object")
    for key in value:
        if key not in keys:
            raise _shape_error(f"unknown field `{key}` in {where}")
    for key in sorted(required):
        if key not in value:
            raise _shape_error(f"missing field `{key}` in {where}")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _shape_error(f"{where} must be a string")
    if utf8_length(value) is None:
        # A `\ud800` escape parses to a lone surrogate, which no UTF-8 file can hold:
        # accepted, it would make the state unsavable after the journal entry was written.
        raise _shape_error(f"{where} contains a lone surrogate")
    return value


def _label(value: str, label: str) -> str:
    text = trim(value)
    size = len(text.encode("utf-8", "surrogatepass"))
    if not 1 <= size <= MAX_LABEL_BYTES or has_control(text):
        raise StateError(f"{label} must be 1..=256 bytes and contain no control characters")
    return text


def parse_import(data: bytes) -> ImportDocument:
    """Validate a whole import document (spec §15.2); every failure is a state error."""
    try:
        document = loads_strict(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise _shape_error(str(error)) from None
    keys = {"schema_version", "source", "memories", "knowledge", "profile"}
    top = _object(document, "the document", keys, {"schema_version", "source"})
    version = _string(top["schema_version"], "schema_version")
    source = _object(top["source"], "source", {"kind", "id"}, {"kind", "id"})
    raw_kind = _string(source["kind"], "source.kind")
    raw_id = _string(source["id"], "source.id")
    raw_items: list[tuple[str, str, str]] = []
    for array_name, category in CATEGORIES:
        array = top.get(array_name, [])
        if not isinstance(array, list):
            raise _shape_error(f"{array_name} must be an array")
        for index, item in enumerate(array):
            where = f"{array_name}[{index}]"
            fields = _object(item, where, {"id", "text"}, {"id", "text"})
            item_id = _string(fields["id"], f"{where}.id")
            raw_items.append((category, item_id, _string(fields["text"], f"{where}.text")))
    if version != IMPORT_SCHEMA:
        raise StateError(f"unsupported import schema {version}; expected {IMPORT_SCHEMA}")
    source_kind = _label(raw_kind, "source.kind")
    source_id = _label(raw_id, "source.id")
    ids = [_label(item_id, f"{category}.id") for category, item_id, _ in raw_items]
    if not raw_items:
        raise StateError("import must contain at least one memory, knowledge, or profile item")
    if len(raw_items) > MAX_IMPORT_ITEMS:
        raise StateError(f"import contains {len(raw_items)} items; maximum is {MAX_IMPORT_ITEMS}")
    items = []
    for (category, _, raw_text), item_id in zip(raw_items, ids, strict=True):
        text = trim(raw_text)
        size = len(text.encode("utf-8", "surrogatepass"))
        if not 1 <= size <= MAX_ITEM_TEXT_BYTES or "\x00" in text:
            raise StateError(
                f"{category} item {item_id} text must be 1..=65536 bytes and contain no NUL"
            )
        items.append(ImportItem(category, item_id, text))
    seen: set[str] = set()
    for item in items:
        if item.item_id in seen:
            raise StateError(f"duplicate source item id {item.item_id} in import")
        seen.add(item.item_id)
    return ImportDocument(source_kind, source_id, items)


def merge(state: AgentState, document: ImportDocument, now: str) -> ImportReport:
    """Merge a validated document into the being; the state changes only when accepted."""
    memories = [memory.model_copy(deep=True) for memory in state.mind.memories]
    owners: dict[tuple[str, str, str], MemoryEntry] = {}
    for memory in memories:
        for source in memory.sources:
            triple = (source.kind, source.source_id, source.item_id)
            if triple in owners and owners[triple] is not memory:
                raise StateError("state contains duplicate memory source attribution")
            owners[triple] = memory
    by_content = {(memory.kind, memory.text): memory for memory in reversed(memories)}
    report = ImportReport(True, document.source_kind, document.source_id)
    for item in document.items:
        triple = (document.source_kind, document.source_id, item.item_id)
        source = Source(kind=triple[0], source_id=triple[1], item_id=triple[2])
        owner = owners.get(triple)
        if owner is not None:
            if owner.kind == item.category and owner.text == item.text:
                report.unchanged += 1
            else:
                report.conflicting += 1
                report.issues.append(
                    {"category": item.category, "item_id": item.item_id, "reason": CONFLICT_REASON}
                )
            continue
        existing = by_content.get((item.category, item.text))
        if existing is not None:
            existing.sources.append(source)
            owners[triple] = existing
            report.attributed += 1
            continue
        memory = MemoryEntry(
            id=str(uuid.uuid4()),
            kind=item.category,
            text=item.text,
            created_at=now,
            sources=[source],
        )
        memories.append(memory)
        owners[triple] = memory
        by_content.setdefault((memory.kind, memory.text), memory)
        report.imported += 1
    if len(memories) > MAX_MEMORIES:
        report.rejected += len(memories) - MAX_MEMORIES
        report.issues.append({"category": "memory", "item_id": "*", "reason": OVERFLOW_REASON})
    if report.conflicting or report.rejected:
        report.accepted = False
        report.imported = report.attributed = 0
        return report
    state.mind.memories = memories
    state.updated_at = now
    return report
