"""How a being maps onto rows: one row for the being, one per list item, one per event.

The being's scalar and record fields are columns of `singularity.beings` (fields a later
version adds go to its `extra` object). Each list of the state is a table of
`(agent_id, seq, …)` rows, `seq` the item's position counted from the being's first: a
step inserts the items it added and deletes those it cut, so it writes what changed. The
conversation keeps every message: those before `conversation_archived` are the archive,
a count the newest message row carries (`ARCHIVED`), so that a step whose oldest message
leaves the window writes no row of the being; likewise `updated_at`, which every save
stamps, rides on the step's events (`UPDATED`).
JSON columns are of type `json` (kept as written, key order included) and read back as
text, so a being read back is byte for byte the being written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from singularity.domain.records import JsonNumber
from singularity.jsoncodec import compact, loads_strict

# Value paths (`singularity.store.changes`) with a column of their own in `beings`.
COLUMNS = {
    "schema_version": "schema_version",
    "status": "status",
    "cycle": "cycle",
    "started_at": "started_at",
    "updated_at": "updated_at",
    "identity": "identity",
    "budget": "budget",
    "mind.system_prompt": "system_prompt",
    "mind.current_model": "current_model",
    "mind.conversation_archived": "conversation_archived",
    "mind.children": "children",
}
JSON_COLUMNS = frozenset({"identity", "budget", "children", "extra"})
BEING_COLUMNS = (*COLUMNS.values(), "extra")


ARCHIVED = (
    "COALESCE((SELECT m.archived FROM singularity.messages m WHERE m.agent_id = b.agent_id "
    "ORDER BY m.seq DESC LIMIT 1), b.conversation_archived)"
)
"""The being `b`'s archived count: its newest message's stamp, else its own column's
(messages written before `0008_archived_in_messages` carry none)."""
UPDATED = (
    "COALESCE((SELECT a.updated_at FROM singularity.activity a WHERE a.agent_id = b.agent_id "
    "AND a.seq > b.updated_after ORDER BY a.seq DESC LIMIT 1), b.updated_at)"
)
"""The being `b`'s `updated_at`: its newest event's stamp when that event is newer than the
being's own column's (events written before `0009_updated_in_events` carry none)."""
DERIVED = {"conversation_archived": ARCHIVED, "updated_at": UPDATED}
BEING_SELECT = ", ".join(
    f"{DERIVED[column]} AS {column}" if column in DERIVED else f"b.{column}"
    for column in BEING_COLUMNS
)
"""The being's columns as read from `singularity.beings b`."""


def load_json(text: str) -> Any:
    """A JSON column's text as the state's loader reads it (exact decimals kept)."""
    return loads_strict(text, parse_float=JsonNumber)


def column_value(column: str, value: Any) -> Any:
    """A field's JSON value as its column's parameter."""
    return compact(value) if column in JSON_COLUMNS else value


def _split(item: dict[str, Any], names: tuple[str, ...]) -> tuple[list[Any], str | None]:
    rest = {key: value for key, value in item.items() if key not in names}
    return [item.get(name) for name in names], (compact(rest) if rest else None)


def _joined(values: tuple[Any, ...], names: tuple[str, ...], extra: str | None) -> dict[str, Any]:
    item = dict(zip(names, values, strict=True))
    if extra is not None:
        item.update(load_json(extra))
    return item


@dataclass(frozen=True)
class ListTable:
    """The table of one list of the state."""

    path: str
    table: str
    columns: tuple[str, ...]
    """Its item columns after `agent_id` and `seq` (and `kind` for resources)."""
    to_row: Callable[[Any], tuple[Any, ...]]
    from_row: Callable[[tuple[Any, ...]], Any]
    kind: str | None = None

    def where(self) -> str:
        """The condition that selects this list's rows of a being."""
        return "agent_id = %s" + (" AND kind = %s" if self.kind else "")

    def key(self, agent_id: str) -> tuple[str, ...]:
        """The parameters of `where`."""
        return (agent_id, self.kind) if self.kind else (agent_id,)


MEMORY_FIELDS = ("id", "kind", "text", "created_at")
ACTION_FIELDS = ("cycle", "tool", "status", "at")


def _memory_row(item: dict[str, Any]) -> tuple[Any, ...]:
    values, extra = _split(item, (*MEMORY_FIELDS, "sources"))
    return (*values[:4], compact(values[4] if values[4] is not None else []), extra)


def _memory(row: tuple[Any, ...]) -> dict[str, Any]:
    item = _joined(row[:4], MEMORY_FIELDS, row[5])
    item["sources"] = load_json(row[4])
    return item


def _action_row(item: dict[str, Any]) -> tuple[Any, ...]:
    values, extra = _split(item, ACTION_FIELDS)
    return (*values, extra)


def _text_table(path: str, table: str) -> ListTable:
    return ListTable(path, table, ("text",), lambda item: (item,), lambda row: row[0])


def _resources(path: str, kind: str) -> ListTable:
    return ListTable(
        path, "resources", ("resource_id",), lambda item: (item,), lambda row: row[0], kind
    )


LISTS = (
    ListTable(
        "conversation",
        "messages",
        ("role", "message"),
        lambda item: (item.get("role"), compact(item)),
        lambda row: load_json(row[1]),
    ),
    ListTable(
        "recent_actions",
        "actions",
        (*ACTION_FIELDS, "extra"),
        _action_row,
        lambda row: _joined(row[:4], ACTION_FIELDS, row[4]),
    ),
    _text_table("mind.rules", "rules"),
    _text_table("mind.learnings", "learnings"),
    ListTable(
        "mind.memories",
        "memories",
        (*MEMORY_FIELDS, "sources", "extra"),
        _memory_row,
        _memory,
    ),
    _resources("created_resources.chat_ids", "chat"),
    _resources("created_resources.message_ids", "message"),
)
TABLES = {table.path: table for table in LISTS}


def document(being: dict[str, Any], lists: dict[str, list[Any]]) -> dict[str, Any]:
    """The state's JSON document from the being's row (by column) and its lists."""
    extra = load_json(being["extra"])
    values: dict[str, Any] = {}
    for path, column in COLUMNS.items():
        raw = being[column]
        values[path] = load_json(raw) if column in JSON_COLUMNS else raw
    values.update(extra)
    values.update(lists)
    result: dict[str, Any] = {"mind": {}, "created_resources": {}}
    for path, value in values.items():
        head, _, tail = path.partition(".")
        if tail:
            result.setdefault(head, {})[tail] = value
        else:
            result[head] = value
    return result
