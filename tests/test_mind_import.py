"""Mind import (spec §15): validation messages, merge semantics, report, journal, refusal.

Contract: the whole document is checked before anything changes, each failure a state
error with the exact message of §15.2; items merge as imported, attributed, unchanged or
conflicting (§15.3); an overflow past 1000 memories is rejected; a conflict or a
rejection refuses the whole import and leaves the state untouched; an accepted import
saves once and journals `mind_imported`; the report is pretty JSON in field order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.domain.records import MemoryEntry, Source
from singularity.domain.state import AgentState, parse_state
from singularity.errors import StateError
from singularity.jsoncodec import pretty
from singularity.runtime.being import open_being
from singularity.runtime.mind_import.apply import import_offline, refusal_message
from singularity.runtime.mind_import.document import merge, parse_import, read_import_file

FIXTURES = Path(__file__).parent / "fixtures" / "import"
SCHEMA = "singularity-mind-import-v1"
IMPORT_TIME = datetime(2026, 7, 1, 12, 0, 0, 500000, tzinfo=UTC)
IMPORT_TEXT = "2026-07-01T12:00:00.500Z"
CONFLICT = "source item was imported before with different content"
OVERFLOW = "import would exceed the 1000-memory state limit"
VALID_TRIPLES = [
    ("memory", "m-1", "The user prefers short answers."),
    ("memory", "m-2", "Deploys happen on Tuesdays.\nNever on Fridays."),
    ("knowledge", "k-1", "Zoë runs the café on rue Émile-Zola."),
    ("profile", "p-1", "Timezone: Europe/Warsaw"),
]


def document(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema_version": SCHEMA,
        "source": {"kind": "notes", "id": "export-1"},
        "memories": [{"id": "m-1", "text": "hello"}],
        "knowledge": [],
        "profile": [],
    }
    base.update(fields)
    return base


def encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def refused(data: bytes) -> str:
    with pytest.raises(StateError) as caught:
        parse_import(data)
    assert caught.value.exit_code == 4
    return str(caught.value)


def items(count: int, prefix: str = "i") -> list[dict[str, str]]:
    return [{"id": f"{prefix}{n}", "text": f"text {prefix}{n}"} for n in range(count)]


def entry(index: int, kind: str = "note", text: str | None = None) -> MemoryEntry:
    return MemoryEntry(
        id=f"00000000-0000-4000-8000-{index:012d}",
        kind=kind,
        text=f"existing {index}" if text is None else text,
        created_at="2026-01-01T00:00:00Z",
        sources=[],
    )


# --- the file ---------------------------------------------------------------------------


def test_a_symlink_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to(FIXTURES / "valid.json")
    with pytest.raises(StateError) as caught:
        read_import_file(str(link))
    assert str(caught.value) == (
        f"state: import file must be a regular file and not a symlink: {link}"
    )


def test_a_directory_or_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (tmp_path, fifo):
        with pytest.raises(StateError) as caught:
            read_import_file(str(path))
        assert str(caught.value) == (
            f"state: import file must be a regular file and not a symlink: {path}"
        )


def test_a_file_that_cannot_be_inspected(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(StateError) as caught:
        read_import_file(str(missing))
    assert str(caught.value) == (
        f"state: cannot inspect import file {missing}: No such file or directory (os error 2)"
    )
    below_a_file = FIXTURES / "valid.json" / "child"
    with pytest.raises(StateError) as caught:
        read_import_file(str(below_a_file))
    assert str(caught.value) == (
        f"state: cannot inspect import file {below_a_file}: Not a directory (os error 20)"
    )


def test_size_bound(tmp_path: Path) -> None:
    body = encode(document())
    exact = tmp_path / "exact.json"
    exact.write_bytes(body + b" " * (16777216 - len(body)))
    assert exact.stat().st_size == 16777216
    assert parse_import(read_import_file(str(exact))).items[0].text == "hello"
    over = tmp_path / "over.json"
    over.write_bytes(body + b" " * (16777217 - len(body)))
    with pytest.raises(StateError) as caught:
        read_import_file(str(over))
    assert str(caught.value) == "state: import file exceeds 16777216 bytes"


# --- shape --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"\xff{}",
        b"[]",
        b"null",
        b'{"schema_version": NaN}',
        encode(document())[:-1],
        b'{"schema_version":"x","schema_version":"y"}',
    ],
)
def test_invalid_json_or_shape(data: bytes) -> None:
    assert refused(data).startswith("state: invalid Singularity import: ")


@pytest.mark.parametrize(
    ("where", "mutate"),
    [
        ("top", lambda d: d.update(comment="x")),
        ("source", lambda d: d["source"].update(url="x")),
        ("memories", lambda d: d["memories"][0].update(tags=[])),
        ("knowledge", lambda d: d["knowledge"].append({"id": "k", "text": "t", "extra": 1})),
        ("profile", lambda d: d["profile"].append({"id": "p", "text": "t", "extra": 1})),
    ],
)
def test_unknown_fields_anywhere_are_refused(
    where: str, mutate: Callable[[dict[str, Any]], None]
) -> None:
    value = document()
    mutate(value)
    message = refused(encode(value))
    assert message.startswith("state: invalid Singularity import: ")
    assert "unknown field" in message


def test_unknown_field_fixture() -> None:
    message = refused((FIXTURES / "unknown-field.json").read_bytes())
    assert message.startswith("state: invalid Singularity import: ")
    assert "tags" in message


@pytest.mark.parametrize(
    "value",
    [
        {"schema_version": SCHEMA, "memories": []},
        document(source={"kind": "k"}),
        document(source="k"),
        document(memories=[{"id": "a"}]),
        document(memories=[{"text": "a"}]),
        document(memories={"id": "a", "text": "b"}),
        document(memories=[{"id": 1, "text": "b"}]),
        document(memories=[{"id": "a", "text": None}]),
        document(source={"kind": 1, "id": "i"}),
        document(schema_version=1),
        document(memories=["text"]),
    ],
)
def test_missing_or_mistyped_fields(value: dict[str, Any]) -> None:
    assert refused(encode(value)).startswith("state: invalid Singularity import: ")


@pytest.mark.parametrize(
    "value",
    [
        document(memories=[{"id": "a", "text": "x\ud800"}]),
        document(memories=[{"id": "\udfff", "text": "x"}]),
        document(source={"kind": "k", "id": "\ud83d"}),
    ],
)
def test_lone_surrogates_are_refused(value: dict[str, Any]) -> None:
    data = json.dumps(value).encode("ascii")  # escapes them as \\udXXX
    assert refused(data).startswith("state: invalid Singularity import: ")


def test_schema_version() -> None:
    assert refused(encode(document(schema_version="singularity-mind-import-v2"))) == (
        "state: unsupported import schema singularity-mind-import-v2; "
        "expected singularity-mind-import-v1"
    )
    assert refused((FIXTURES / "wrong-schema.json").read_bytes()) == (
        "state: unsupported import schema singularity-mind-import-v2; "
        "expected singularity-mind-import-v1"
    )
    assert refused(encode(document(schema_version=""))) == (
        "state: unsupported import schema ; expected singularity-mind-import-v1"
    )


# --- labels ---------------------------------------------------------------------------

BAD_LABELS = ["", "   ", "\u3000", "a\nb", "a\tb", "a\x00", "\x7fa", "a\x85b", "é" * 128 + "x"]


def _with_label(label: str, value: str) -> dict[str, Any]:
    if label == "source.kind":
        return document(source={"kind": value, "id": "i"})
    if label == "source.id":
        return document(source={"kind": "k", "id": value})
    array = {"memory.id": "memories", "knowledge.id": "knowledge", "profile.id": "profile"}[label]
    return document(**{"memories": [], array: [{"id": value, "text": "t"}]})


@pytest.mark.parametrize(
    "label", ["source.kind", "source.id", "memory.id", "knowledge.id", "profile.id"]
)
@pytest.mark.parametrize("value", BAD_LABELS, ids=repr)
def test_bad_labels(label: str, value: str) -> None:
    assert refused(encode(_with_label(label, value))) == (
        f"state: {label} must be 1..=256 bytes and contain no control characters"
    )


@pytest.mark.parametrize(
    "label", ["source.kind", "source.id", "memory.id", "knowledge.id", "profile.id"]
)
def test_labels_up_to_256_bytes_are_trimmed(label: str) -> None:
    value = "€" * 85 + "a"  # 256 bytes
    parsed = parse_import(encode(_with_label(label, f" {value}\n")))
    stored = {
        "source.kind": parsed.source_kind,
        "source.id": parsed.source_id,
    }.get(label, parsed.items[0].item_id)
    assert stored == value


# --- counts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        document(memories=[]),
        {"schema_version": SCHEMA, "source": {"kind": "k", "id": "i"}},
    ],
)
def test_zero_items(value: dict[str, Any]) -> None:
    assert refused(encode(value)) == (
        "state: import must contain at least one memory, knowledge, or profile item"
    )


def test_item_count_bound() -> None:
    at_limit = document(memories=items(400, "m"), knowledge=items(300, "k"), profile=items(300))
    assert len(parse_import(encode(at_limit)).items) == 1000
    over = document(memories=items(400, "m"), knowledge=items(300, "k"), profile=items(301))
    assert refused(encode(over)) == "state: import contains 1001 items; maximum is 1000"


# --- item text ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("array", "category"),
    [("memories", "memory"), ("knowledge", "knowledge"), ("profile", "profile")],
)
@pytest.mark.parametrize(
    "text", ["", "  \n\t ", "a\x00b", "\x00", "x" * 65537, "é" * 32768 + "x"], ids=len
)
def test_bad_item_text(array: str, category: str, text: str) -> None:
    value = document(**{"memories": [], array: [{"id": " it-1 ", "text": text}]})
    assert refused(encode(value)) == (
        f"state: {category} item it-1 text must be 1..=65536 bytes and contain no NUL"
    )


def test_item_text_bound_and_allowed_characters() -> None:
    longest = "é" * 32768  # 65536 bytes
    allowed = "line one\nline two\twith a tab\x01 and a bell\x07"
    value = document(memories=[{"id": "a", "text": f"\n{longest} "}, {"id": "b", "text": allowed}])
    parsed = parse_import(encode(value))
    assert [item.text for item in parsed.items] == [longest, allowed]


def test_duplicate_ids_across_arrays() -> None:
    value = document(
        memories=[{"id": "x", "text": "1"}],
        knowledge=[{"id": "y", "text": "2"}],
        profile=[{"id": " x\u3000", "text": "3"}],
    )
    assert refused(encode(value)) == "state: duplicate source item id x in import"
    value = document(memories=[{"id": "same", "text": "1"}, {"id": "same", "text": "2"}])
    assert refused(encode(value)) == "state: duplicate source item id same in import"
    parse_import(encode(document(memories=[{"id": "a", "text": "1"}, {"id": "A", "text": "2"}])))


def test_valid_fixture_is_trimmed_in_document_order() -> None:
    parsed = parse_import((FIXTURES / "valid.json").read_bytes())
    assert (parsed.source_kind, parsed.source_id) == ("notes-export", "export-2026-01")
    assert [(i.category, i.item_id, i.text) for i in parsed.items] == VALID_TRIPLES


# --- merge on a real being ------------------------------------------------------------


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "being"
    being = open_being(resolve({"state_dir": str(path)}, environ={}))
    being.save()
    being.close()
    return path


def _rewrite(state_dir: Path, change: Callable[[AgentState], None]) -> None:
    being = open_being(resolve({"state_dir": str(state_dir), "resume": True}, environ={}))
    change(being.state)
    being.checkpoint()  # stopped cleanly: state.json alone is current
    being.close()


def _load(state_dir: Path) -> AgentState:
    return parse_state((state_dir / "state.json").read_bytes())


def _journal(state_dir: Path) -> list[str]:
    path = state_dir / "activity.jsonl"
    return path.read_text("utf-8").splitlines() if path.exists() else []


def _files(state_dir: Path) -> dict[str, bytes]:
    return {
        name: (state_dir / name).read_bytes()
        for name in sorted(os.listdir(state_dir))
        if name != "lock"
    }


def _import(state_dir: Path, fixture: str | Path) -> dict[str, Any]:
    path = fixture if isinstance(fixture, Path) else FIXTURES / fixture
    return import_offline(str(path), str(state_dir), clock=lambda: IMPORT_TIME).to_json()


def _write(tmp_path: Path, value: dict[str, Any], name: str = "doc.json") -> Path:
    path = tmp_path / name
    path.write_bytes(encode(value))
    return path


def test_import_into_a_fresh_being(state_dir: Path) -> None:
    before = _load(state_dir)
    report = _import(state_dir, "valid.json")
    assert report == {
        "accepted": True,
        "source_kind": "notes-export",
        "source_id": "export-2026-01",
        "imported": 4,
        "attributed": 0,
        "unchanged": 0,
        "conflicting": 0,
        "rejected": 0,
        "issues": [],
    }
    after = _load(state_dir)
    assert [
        (m.kind, m.text, m.created_at, [s.model_dump() for s in m.sources])
        for m in after.mind.memories
    ] == [
        (
            kind,
            text,
            IMPORT_TEXT,
            [{"kind": "notes-export", "source_id": "export-2026-01", "item_id": item_id}],
        )
        for kind, item_id, text in VALID_TRIPLES
    ]
    assert len({m.id for m in after.mind.memories}) == 4
    assert after.updated_at == IMPORT_TEXT
    # Nothing else changes.
    unchanged_parts: Any = {"mind": {"memories"}, "updated_at": True}
    assert after.model_dump(exclude=unchanged_parts) == before.model_dump(exclude=unchanged_parts)
    assert _journal(state_dir) == [
        f'{{"type":"mind_imported","at":"{IMPORT_TEXT}","source_kind":"notes-export",'
        '"source_id":"export-2026-01","imported":4,"attributed":0,"unchanged":0}'
    ]


def test_reimport_is_unchanged_and_still_journaled(state_dir: Path) -> None:
    _import(state_dir, "valid.json")
    memories = _load(state_dir).mind.memories
    report = _import(state_dir, "valid.json")
    assert (report["accepted"], report["imported"], report["attributed"]) == (True, 0, 0)
    assert (report["unchanged"], report["conflicting"], report["rejected"]) == (4, 0, 0)
    assert _load(state_dir).mind.memories == memories
    assert _journal(state_dir)[-1] == (
        f'{{"type":"mind_imported","at":"{IMPORT_TEXT}","source_kind":"notes-export",'
        '"source_id":"export-2026-01","imported":0,"attributed":0,"unchanged":4}'
    )


def test_same_kind_and_text_is_attributed(state_dir: Path, tmp_path: Path) -> None:
    _rewrite(
        state_dir,
        lambda s: s.mind.memories.extend(
            [entry(1, "knowledge", "Invoices are due in 30 days."), entry(2, "memory", "other")]
        ),
    )
    report = _import(state_dir, "only-knowledge.json")
    assert (report["imported"], report["attributed"], report["unchanged"]) == (0, 1, 0)
    memories = _load(state_dir).mind.memories
    assert len(memories) == 2
    assert [s.model_dump() for s in memories[0].sources] == [
        {"kind": "wiki", "source_id": "team-wiki", "item_id": "w-1"}
    ]
    assert memories[0].id == entry(1).id
    assert memories[0].created_at == "2026-01-01T00:00:00Z"
    # Same text under another kind is a different memory.
    path = _write(tmp_path, document(profile=[{"id": "p", "text": "other"}], memories=[]))
    report = _import(state_dir, path)
    assert (report["imported"], report["attributed"]) == (1, 0)
    assert [m.kind for m in _load(state_dir).mind.memories] == ["knowledge", "memory", "profile"]


def test_repeated_text_within_one_document_is_attributed(state_dir: Path, tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        document(memories=[{"id": "a", "text": "same"}, {"id": "b", "text": " same "}]),
    )
    report = _import(state_dir, path)
    assert (report["imported"], report["attributed"]) == (1, 1)
    [memory] = _load(state_dir).mind.memories
    assert [s.item_id for s in memory.sources] == ["a", "b"]


def test_conflict_refuses_everything_and_changes_nothing(state_dir: Path) -> None:
    _import(state_dir, "valid.json")
    files = _files(state_dir)
    report = _import(state_dir, "changed.json")
    assert report == {
        "accepted": False,
        "source_kind": "notes-export",
        "source_id": "export-2026-01",
        "imported": 0,
        "attributed": 0,
        "unchanged": 1,
        "conflicting": 1,
        "rejected": 0,
        "issues": [{"category": "memory", "item_id": "m-2", "reason": CONFLICT}],
    }
    assert _files(state_dir) == files


def test_same_item_under_another_category_conflicts(state_dir: Path, tmp_path: Path) -> None:
    _import(state_dir, "valid.json")
    moved = _write(
        tmp_path,
        {
            "schema_version": SCHEMA,
            "source": {"kind": "notes-export", "id": "export-2026-01"},
            "profile": [{"id": "k-1", "text": "Zoë runs the café on rue Émile-Zola."}],
        },
    )
    report = _import(state_dir, moved)
    assert report["conflicting"] == 1
    assert report["issues"] == [{"category": "profile", "item_id": "k-1", "reason": CONFLICT}]


def test_another_source_with_the_same_item_ids_does_not_conflict(
    state_dir: Path, tmp_path: Path
) -> None:
    _import(state_dir, "valid.json")
    other = _write(
        tmp_path,
        document(
            source={"kind": "notes-export", "id": "export-2"},
            memories=[{"id": "m-2", "text": "different"}],
        ),
    )
    report = _import(state_dir, other)
    assert (report["accepted"], report["imported"]) == (True, 1)


def test_overflow_is_rejected(state_dir: Path, tmp_path: Path) -> None:
    _rewrite(state_dir, lambda s: s.mind.memories.extend(entry(i) for i in range(997)))
    files = _files(state_dir)
    path = _write(
        tmp_path,
        document(
            memories=[{"id": "a", "text": "existing 5"}, {"id": "b", "text": "new b"}],
            knowledge=[{"id": "c", "text": "new c"}],
            profile=[{"id": "d", "text": "new d"}, {"id": "e", "text": "new e"}],
        ),
    )
    report = _import(state_dir, path)
    # "existing 5" is kind `note`, so it is new as a `memory`: 997 + 5 = 1002.
    assert report == {
        "accepted": False,
        "source_kind": "notes",
        "source_id": "export-1",
        "imported": 0,
        "attributed": 0,
        "unchanged": 0,
        "conflicting": 0,
        "rejected": 2,
        "issues": [{"category": "memory", "item_id": "*", "reason": OVERFLOW}],
    }
    assert _files(state_dir) == files


def test_import_up_to_exactly_1000_memories(state_dir: Path, tmp_path: Path) -> None:
    _rewrite(state_dir, lambda s: s.mind.memories.extend(entry(i) for i in range(998)))
    path = _write(
        tmp_path, document(memories=items(2), knowledge=[{"id": "x", "text": "existing 1"}])
    )
    state = _load(state_dir)
    state.mind.memories[1].kind = "knowledge"
    report = merge(state, parse_import(path.read_bytes()), IMPORT_TEXT)
    assert (report.accepted, report.imported, report.attributed) == (True, 2, 1)
    assert len(state.mind.memories) == 1000


def test_one_past_the_limit_is_rejected(state_dir: Path) -> None:
    state = _load(state_dir)
    state.mind.memories = [entry(i) for i in range(999)]
    before = state.model_dump_json()
    report = merge(state, parse_import(encode(document(memories=items(2)))), IMPORT_TEXT)
    assert (report.accepted, report.imported, report.rejected) == (False, 0, 1)
    assert report.issues == [{"category": "memory", "item_id": "*", "reason": OVERFLOW}]
    assert state.model_dump_json() == before


def test_conflict_and_overflow_together(state_dir: Path, tmp_path: Path) -> None:
    _import(state_dir, "valid.json")
    _rewrite(state_dir, lambda s: s.mind.memories.extend(entry(i) for i in range(996)))
    path = _write(
        tmp_path,
        {
            "schema_version": SCHEMA,
            "source": {"kind": "notes-export", "id": "export-2026-01"},
            "memories": [{"id": "m-1", "text": "changed"}, *items(3)],
        },
    )
    report = _import(state_dir, path)
    # 4 imported before + 996 = 1000 memories; 3 more would overflow by 3.
    assert (report["conflicting"], report["rejected"], report["imported"]) == (1, 3, 0)
    assert report["issues"] == [
        {"category": "memory", "item_id": "m-1", "reason": CONFLICT},
        {"category": "memory", "item_id": "*", "reason": OVERFLOW},
    ]


def test_preexisting_duplicate_attribution(state_dir: Path) -> None:
    triple = Source(kind="wiki", source_id="team-wiki", item_id="w-1")

    def duplicate(state: AgentState) -> None:
        first, second = entry(1), entry(2)
        first.sources.append(triple)
        second.sources.append(triple)
        state.mind.memories.extend([first, second])

    _rewrite(state_dir, duplicate)
    files = _files(state_dir)
    with pytest.raises(StateError) as caught:
        _import(state_dir, "valid.json")
    assert str(caught.value) == "state: state contains duplicate memory source attribution"
    assert _files(state_dir) == files


def test_the_same_triple_twice_on_one_memory_is_not_a_duplicate(state_dir: Path) -> None:
    triple = Source(kind="wiki", source_id="team-wiki", item_id="w-1")

    def twice(state: AgentState) -> None:
        memory = entry(1, "knowledge", "Invoices are due in 30 days.")
        memory.sources.extend([triple, triple])
        state.mind.memories.append(memory)

    _rewrite(state_dir, twice)
    assert _import(state_dir, "only-knowledge.json")["unchanged"] == 1


def test_validation_failure_changes_nothing(state_dir: Path) -> None:
    files = _files(state_dir)
    with pytest.raises(StateError):
        _import(state_dir, "unknown-field.json")
    assert _files(state_dir) == files


def test_no_being(tmp_path: Path) -> None:
    target = tmp_path / "nobody"
    with pytest.raises(StateError) as caught:
        _import(target, "valid.json")
    assert str(caught.value) == (
        f"state: no being state exists at {target}/state.json; create the being before importing"
    )
    assert not (target / "state.json").exists()


# --- report ---------------------------------------------------------------------------


def test_report_pretty_json_bytes(state_dir: Path) -> None:
    accepted = _import(state_dir, "valid.json")
    assert pretty(accepted) == (
        "{\n"
        '  "accepted": true,\n'
        '  "source_kind": "notes-export",\n'
        '  "source_id": "export-2026-01",\n'
        '  "imported": 4,\n'
        '  "attributed": 0,\n'
        '  "unchanged": 0,\n'
        '  "conflicting": 0,\n'
        '  "rejected": 0,\n'
        '  "issues": []\n'
        "}"
    )
    refused_report = import_offline(str(FIXTURES / "changed.json"), str(state_dir))
    assert pretty(refused_report.to_json()) == (
        "{\n"
        '  "accepted": false,\n'
        '  "source_kind": "notes-export",\n'
        '  "source_id": "export-2026-01",\n'
        '  "imported": 0,\n'
        '  "attributed": 0,\n'
        '  "unchanged": 1,\n'
        '  "conflicting": 1,\n'
        '  "rejected": 0,\n'
        '  "issues": [\n'
        "    {\n"
        '      "category": "memory",\n'
        '      "item_id": "m-2",\n'
        f'      "reason": "{CONFLICT}"\n'
        "    }\n"
        "  ]\n"
        "}"
    )
    assert refusal_message(refused_report.conflicting, refused_report.rejected) == (
        "import refused: 1 conflicting and 0 rejected item(s); no state was changed"
    )


def test_the_startup_refusal_says_no_state_was_created() -> None:
    assert refusal_message(2, 1, prefix="startup import refused", state="created") == (
        "startup import refused: 2 conflicting and 1 rejected item(s); no state was created"
    )
