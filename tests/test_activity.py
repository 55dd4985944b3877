"""`activity.jsonl` (spec §5.5; decision 13).

Contract: one compact JSON object per line (`type` first, then the event's fields in
the spec's order, non-ASCII not escaped, `\\n`-terminated), appended by the directory
store's steps; at open a torn last line is cut off and reported, while a bad line followed
by good ones refuses with `state: activity.jsonl is corrupt at line N` and changes nothing.
The journal is written as a being writes it: through `DirectoryStore` (`commit`, `load`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path

import pytest

from singularity.domain import events
from singularity.errors import FatalIoError, StateError
from singularity.storage import fsio
from singularity.storage.activity import read_events, scan
from singularity.store.base import Event
from singularity.store.directory import DirectoryStore
from tests.support.beings import new_state

AT = "2026-01-02T03:04:05.123Z"

# Every record of domain/events.py with the exact line it must produce (spec §5.5's order).
RECORDS: list[tuple[events.ActivityEvent, bytes]] = [
    (events.Started(AT), b'{"type":"started","at":"2026-01-02T03:04:05.123Z"}\n'),
    (
        events.CycleStarted(AT, 7),
        b'{"type":"cycle_started","at":"2026-01-02T03:04:05.123Z","cycle":7}\n',
    ),
    (
        events.ModelCompleted(AT, 7, events.Usage(120, 30)),
        b'{"type":"model_completed","at":"2026-01-02T03:04:05.123Z","cycle":7,'
        b'"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150}}\n',
    ),
    (
        events.CostReserved(
            AT, 7, "op-1", Decimal("0.00125"), Decimal("0.0000027777777777777777777778")
        ),
        b'{"type":"cost_reserved","at":"2026-01-02T03:04:05.123Z","cycle":7,'
        b'"operation_id":"op-1","api":"0.00125","instance":"0.0000027777777777777777777778"}\n',
    ),
    (
        events.CostReleased(AT, 7, "op-1"),
        b'{"type":"cost_released","at":"2026-01-02T03:04:05.123Z","cycle":7,'
        b'"operation_id":"op-1"}\n',
    ),
    (
        events.CostDebited(AT, 7, "op-1", Decimal("0.001"), Decimal("0.0000001"), 150),
        b'{"type":"cost_debited","at":"2026-01-02T03:04:05.123Z","cycle":7,'
        b'"amount":"0.0010001","operation_id":"op-1","api":"0.001","instance":"0.0000001",'
        b'"tokens":150}\n',
    ),
    (
        events.CostDebited(AT, 8, "op-2", Decimal(0), Decimal(0), 0),
        b'{"type":"cost_debited","at":"2026-01-02T03:04:05.123Z","cycle":8,'
        b'"amount":"0","operation_id":"op-2","api":"0","instance":"0","tokens":0}\n',
    ),
    (
        events.OutputBounded(
            AT, 7, "files__read", "redact", None, {"workspace path shown relative": 2}
        ),
        b'{"type":"output_bounded","at":"2026-01-02T03:04:05.123Z","cycle":7,'
        b'"tool":"files__read","mode":"redact","rejection":null,'
        b'"redactions":{"workspace path shown relative":2}}\n',
    ),
    (
        events.OutputBounded(AT, 7, "t", "strict", "string contains a raw local path", {}),
        b'{"type":"output_bounded","at":"2026-01-02T03:04:05.123Z","cycle":7,"tool":"t",'
        b'"mode":"strict","rejection":"string contains a raw local path","redactions":{}}\n',
    ),
    (
        events.ToolFinished(AT, 7, "singularity_file_read", "indeterminate"),
        b'{"type":"tool_finished","at":"2026-01-02T03:04:05.123Z","cycle":7,'
        b'"tool":"singularity_file_read","status":"indeterminate"}\n',
    ),
    (
        events.RevenueCredited(AT, 7, Decimal("12.50"), "finance_receive"),
        b'{"type":"revenue_credited","at":"2026-01-02T03:04:05.123Z","cycle":7,'
        b'"amount":"12.50","source":"finance_receive"}\n',
    ),
    (
        events.MindImported(AT, "chat", "src-\u017c", 3, 1, 2),
        '{"type":"mind_imported","at":"2026-01-02T03:04:05.123Z","source_kind":"chat",'
        '"source_id":"src-\u017c","imported":3,"attributed":1,"unchanged":2}\n'.encode(),
    ),
    (
        events.Warned(AT, 7, 'round limit "8" reached \u2014 za\u017c\u00f3\u0142\u0107\nnext'),
        (
            '{"type":"warning","at":"2026-01-02T03:04:05.123Z","cycle":7,'
            '"message":"round limit \\"8\\" reached \u2014 '
            'za\u017c\u00f3\u0142\u0107\\nnext"}\n'
        ).encode(),
    ),
    (
        events.Stopped(AT, 9, "exhausted"),
        b'{"type":"stopped","at":"2026-01-02T03:04:05.123Z","cycle":9,"status":"exhausted"}\n',
    ),
    (
        events.ChildFunded(AT, 7, "op-3", "c-1", Decimal("2.50"), {"id": "c-1", "name": "K\u00ed"}),
        '{"type":"child_funded","at":"2026-01-02T03:04:05.123Z","cycle":7,"operation_id":"op-3",'
        '"child_id":"c-1","amount":"2.50","record":{"id":"c-1","name":"K\u00ed"}}\n'.encode(),
    ),
    (
        events.ChildRefunded(AT, 7, "op-3", "c-1", Decimal("2.50")),
        b'{"type":"child_refunded","at":"2026-01-02T03:04:05.123Z","cycle":7,"operation_id":"op-3",'
        b'"child_id":"c-1","amount":"2.50"}\n',
    ),
    (
        events.JournalEntryAdded(AT, 4, "e-1", "calm", False),
        b'{"type":"journal_entry_added","at":"2026-01-02T03:04:05.123Z","cycle":4,"id":"e-1",'
        b'"mood":"calm","redacted":false}\n',
    ),
    (
        events.JournalRecalled(AT, 4, 5, ["e-1", "e-2"]),
        b'{"type":"journal_recalled","at":"2026-01-02T03:04:05.123Z","cycle":4,"k":5,'
        b'"ids":["e-1","e-2"]}\n',
    ),
    (
        events.JournalPromoted(AT, 4, "e-1", "reasonlog", "reasonlog:r-1"),
        b'{"type":"journal_promoted","at":"2026-01-02T03:04:05.123Z","cycle":4,"id":"e-1",'
        b'"target":"reasonlog","ref":"reasonlog:r-1"}\n',
    ),
    (
        events.JournalPurged(AT, 4, 3),
        b'{"type":"journal_purged","at":"2026-01-02T03:04:05.123Z","cycle":4,"count":3}\n',
    ),
    (
        events.SanctumInitialized(AT, "finished", ["BOND.md"]),
        b'{"type":"sanctum_initialized","at":"2026-01-02T03:04:05.123Z","outcome":"finished",'
        b'"filled":["BOND.md"]}\n',
    ),
    (
        events.SanctumWritten(AT, 4, "memory/topics/a.md", 12),
        b'{"type":"sanctum_written","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"path":"memory/topics/a.md","bytes":12}\n',
    ),
    (
        events.SanctumMerged(AT, 4, "memory/topics/a.md", "memory/topics/b.md"),
        b'{"type":"sanctum_merged","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"keep":"memory/topics/a.md","drop":"memory/topics/b.md"}\n',
    ),
    (
        events.SanctumTended(AT, 4, "2026-01-02", {"session_notes": 3}),
        b'{"type":"sanctum_tended","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"date":"2026-01-02","counts":{"session_notes":3}}\n',
    ),
    (
        events.SessionNoteAuto(AT, 4, "memory/sessions/2026-01-02-cycle-4.md"),
        b'{"type":"session_note_auto","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"path":"memory/sessions/2026-01-02-cycle-4.md"}\n',
    ),
    (
        events.PulseStarted(AT, 5, 8, Decimal("0.10")),
        b'{"type":"pulse_started","at":"2026-01-02T03:04:05.123Z","cycle":5,"max_rounds":8,'
        b'"max_cost":"0.10"}\n',
    ),
    (
        events.PulseFinished(AT, 5, "cost_cap", Decimal("0.05")),
        b'{"type":"pulse_finished","at":"2026-01-02T03:04:05.123Z","cycle":5,'
        b'"status":"cost_cap","cost":"0.05"}\n',
    ),
    (
        events.Stopped(AT, 9, "failed"),
        b'{"type":"stopped","at":"2026-01-02T03:04:05.123Z","cycle":9,"status":"failed"}\n',
    ),
    (
        events.ModelCompleted(AT, 7, events.Usage(1, 2), "smollm2"),
        b'{"type":"model_completed","at":"2026-01-02T03:04:05.123Z","cycle":7,'
        b'"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3},"model":"smollm2"}\n',
    ),
    (
        events.JournalRecovered(AT, 3, "damaged", "journal.sqlite3.damaged-1", 5, 2, False),
        b'{"type":"journal_recovered","at":"2026-01-02T03:04:05.123Z","cycle":3,'
        b'"reason":"damaged","set_aside":"journal.sqlite3.damaged-1","kept":5,"lost":2,'
        b'"unreachable":false}\n',
    ),
    (
        events.CycleFinished(AT, 4, "completed"),
        b'{"type":"cycle_finished","at":"2026-01-02T03:04:05.123Z","cycle":4,"status":"completed"}\n',
    ),
    (
        events.OperatorMessage(AT, 4, "r1", 12),
        b'{"type":"operator_message","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"request_id":"r1","bytes":12}\n',
    ),
    (
        events.OperatorPaused(AT, 4, "r2", "paused"),
        b'{"type":"operator_paused","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"request_id":"r2","effect":"paused"}\n',
    ),
    (
        events.OperatorResumed(AT, 4, "r2b", "was not paused"),
        b'{"type":"operator_resumed","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"request_id":"r2b","effect":"was not paused"}\n',
    ),
    (
        events.OperatorStopped(AT, 4, "r2c", "stopping"),
        b'{"type":"operator_stopped","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"request_id":"r2c","effect":"stopping"}\n',
    ),
    (
        events.OperatorCredited(AT, 4, Decimal("2.5"), "op-1", "r3", "top-up"),
        b'{"type":"operator_credited","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"amount":"2.5","operation_id":"op-1","request_id":"r3","note":"top-up"}\n',
    ),
    (
        events.OperatorSanctumWritten(AT, 4, "r4", "sanctum/PERSONA.md", 7, None, "ab"),
        b'{"type":"operator_sanctum_written","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"request_id":"r4","path":"sanctum/PERSONA.md","bytes":7,"sha256_before":null,'
        b'"sha256_after":"ab"}\n',
    ),
    (
        events.OperatorRequestRefused(AT, 4, "r5", "credit", "amount out of range"),
        b'{"type":"operator_request_refused","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"request_id":"r5","kind":"credit","reason":"amount out of range"}\n',
    ),
    (
        events.SelfEditProposed(AT, 4, "p1", "singularity_self_add_rule", "be kind"),
        b'{"type":"self_edit_proposed","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"proposal_id":"p1","tool":"singularity_self_add_rule","text":"be kind"}\n',
    ),
    (
        events.SelfEditDecided(AT, 4, "r6", "p1", "approved"),
        b'{"type":"self_edit_decided","at":"2026-01-02T03:04:05.123Z","cycle":4,'
        b'"request_id":"r6","proposal_id":"p1","decision":"approved"}\n',
    ),
]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def dir_fd(state_dir: Path) -> Iterator[int]:
    fd = fsio.open_dir(state_dir)
    yield fd
    os.close(fd)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _journal(*records: bytes) -> bytes:
    return b"".join(records)


def _opened(state_dir: Path) -> DirectoryStore:
    """The being's store, opened and loaded as a boot does (a journal without a state)."""
    store = DirectoryStore.open(str(state_dir))
    with contextlib.ExitStack() as closing_on_failure:
        closing_on_failure.callback(store.close)
        assert store.load() is None
        closing_on_failure.pop_all()
    return store


def _append(state_dir: Path, steps: Sequence[Sequence[Event]]) -> None:
    """A new being's steps, each committed with its events: the first, then logged ones."""
    store = _opened(state_dir)
    try:
        state = new_state()
        for step in steps:
            state.cycle += 1
            store.commit(state, step)
    finally:
        store.close()


def _repaired(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "torn last line" in r.getMessage()]


LINES = [(events.encode(record), line) for record, line in RECORDS]
SAMPLE = [line for _, line in LINES[:5]]


# --- line format -----------------------------------------------------------------------


@pytest.mark.parametrize(("event", "line"), LINES, ids=[line[9:30].decode() for _, line in LINES])
def test_each_event_is_written_as_its_exact_line(
    state_dir: Path, event: events.Event, line: bytes
) -> None:
    _append(state_dir, [[event]])
    assert (state_dir / "activity.jsonl").read_bytes() == line
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    assert line.startswith(b'{"type":"')


def test_every_record_in_events_is_covered() -> None:
    assert set(events.RECORDS) == {record.type for record, _ in RECORDS}


@pytest.mark.parametrize(
    ("record", "line"), RECORDS, ids=[line[9:30].decode() for _, line in RECORDS]
)
def test_each_line_decodes_to_its_record(record: events.ActivityEvent, line: bytes) -> None:
    assert events.decode(json.loads(line)) == record


def test_an_unknown_type_decodes_to_nothing_and_a_bad_event_says_what() -> None:
    assert events.decode({"type": "from_a_later_version", "at": AT}) is None
    with pytest.raises(events.EventShapeError, match="cycle_started event has no cycle"):
        events.decode({"type": "cycle_started", "at": AT})
    with pytest.raises(events.EventShapeError, match="cost_released event has no operation_id"):
        events.decode({"type": "cost_released", "at": AT, "cycle": 1})
    with pytest.raises(events.EventShapeError, match="pulse_finished event has a bad cost"):
        events.decode({"type": "pulse_finished", "at": AT, "cycle": 1, "status": "x", "cost": "a"})
    with pytest.raises(events.EventShapeError, match="cycle_started event has a bad cycle"):
        events.decode({"type": "cycle_started", "at": AT, "cycle": "1"})
    with pytest.raises(events.EventShapeError, match="journal_recalled event has a bad ids"):
        events.decode({"type": "journal_recalled", "at": AT, "cycle": 1, "k": 1, "ids": [1]})
    with pytest.raises(events.EventShapeError, match="journal_entry_added event has a bad mood"):
        bad = {"type": "journal_entry_added", "at": AT, "cycle": 1, "id": "j", "mood": 3}
        events.decode({**bad, "redacted": False})
    for usage in ("many", {"prompt_tokens": "a"}, {"completion_tokens": -1}):
        with pytest.raises(events.EventShapeError, match="model_completed event has a bad usage"):
            events.decode({"type": "model_completed", "at": AT, "cycle": 1, "usage": usage})


def test_a_reader_passes_over_what_it_cannot_read() -> None:
    assert events.readable({"type": "cycle_started", "at": AT, "cycle": True}) is None
    assert events.readable({"type": "from_a_later_version", "at": AT}) is None
    assert events.readable({"type": "cycle_started", "at": AT, "cycle": 2}) == (
        events.CycleStarted(AT, 2)
    )


def test_spec_field_order_of_the_baseline_events() -> None:
    spec = {
        "started": ["at"],
        "cycle_started": ["at", "cycle"],
        "model_completed": ["at", "cycle", "usage"],
        "cost_debited": ["at", "cycle", "amount"],
        "tool_finished": ["at", "cycle", "tool", "status"],
        "revenue_credited": ["at", "cycle", "amount", "source"],
        "mind_imported": [
            "at",
            "source_kind",
            "source_id",
            "imported",
            "attributed",
            "unchanged",
        ],
        "warning": ["at", "cycle", "message"],
        "stopped": ["at", "cycle", "status"],
    }
    for event, _ in LINES:
        fields = spec.get(event["type"])
        if fields is not None:
            keys = list(event)
            assert keys[0] == "type"
            assert keys[1 : 1 + len(fields)] == fields  # extensions only after the spec's


def test_appends_accumulate_and_the_file_is_0600(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    os.umask(0o000)
    _append(state_dir, [[event] for event, _ in LINES])
    path = state_dir / "activity.jsonl"
    assert path.read_bytes() == b"".join(line for _, line in LINES)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    reopened = DirectoryStore.open(str(state_dir))
    try:
        assert reopened.load() is not None
        assert reopened.events_at_open == [event for event, _ in LINES]
    finally:
        reopened.close()
    assert _repaired(caplog) == []


def test_open_tightens_an_existing_journal_to_0600(state_dir: Path) -> None:
    path = state_dir / "activity.jsonl"
    path.write_bytes(SAMPLE[0])
    os.chmod(path, 0o644)
    _opened(state_dir).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_symlinked_journal_is_refused_and_its_target_untouched(
    tmp_path: Path, state_dir: Path
) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    (state_dir / "activity.jsonl").symlink_to(target)
    with pytest.raises(FatalIoError) as caught:
        _opened(state_dir)
    assert caught.value.exit_code == 4
    assert target.read_bytes() == b"keep"


# --- torn tail -------------------------------------------------------------------------


def test_truncation_at_every_offset_of_the_last_record_is_repaired(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    complete = _journal(*SAMPLE[:-1])
    last = SAMPLE[-1]
    path = state_dir / "activity.jsonl"
    expected_events = scan(complete).events
    assert len(expected_events) == len(SAMPLE) - 1
    fds = _open_fds()
    for cut in range(len(last)):  # 0 .. everything but the final newline
        for name in ("state.json", "state.redo"):  # the previous round's being
            (state_dir / name).unlink(missing_ok=True)
        path.write_bytes(complete + last[:cut])
        caplog.clear()
        store = _opened(state_dir)
        try:
            assert _repaired(caplog) == (
                [f"cut a torn last line of {cut} bytes from activity.jsonl"] if cut else []
            ), cut
            assert store.events_at_open == expected_events, cut
            assert path.read_bytes() == complete, cut
            # The next append starts on a clean line.
            store.commit(new_state(), [events.encode(events.Started(AT))])
        finally:
            store.close()
        assert path.read_bytes() == complete + LINES[0][1], cut
    assert _open_fds() == fds


def test_a_complete_last_record_is_not_repaired(
    state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    data = _journal(*SAMPLE)
    (state_dir / "activity.jsonl").write_bytes(data)
    store = _opened(state_dir)
    store.close()
    assert _repaired(caplog) == []
    assert len(store.events_at_open) == len(SAMPLE)
    assert (state_dir / "activity.jsonl").read_bytes() == data


def test_read_events_ignores_a_torn_tail_without_changing_the_file(
    state_dir: Path, dir_fd: int
) -> None:
    data = _journal(*SAMPLE) + SAMPLE[0][:10]
    (state_dir / "activity.jsonl").write_bytes(data)
    assert len(read_events(dir_fd)) == len(SAMPLE)
    assert (state_dir / "activity.jsonl").read_bytes() == data


def test_missing_journal_reads_as_empty_and_opens_as_a_new_file(
    state_dir: Path, dir_fd: int
) -> None:
    assert read_events(dir_fd) == []
    store = _opened(state_dir)
    store.close()
    assert store.events_at_open == []
    assert (state_dir / "activity.jsonl").read_bytes() == b""


# --- corruption ------------------------------------------------------------------------


def test_a_flipped_byte_anywhere_in_a_middle_record_refuses_and_changes_nothing(
    state_dir: Path,
) -> None:
    path = state_dir / "activity.jsonl"
    middle = 2  # line 3 of 5
    start = sum(len(line) for line in SAMPLE[:middle])
    good = _journal(*SAMPLE)
    fds = _open_fds()
    for offset in range(start, start + len(SAMPLE[middle])):
        damaged = bytearray(good)
        damaged[offset] ^= 0x80  # never valid UTF-8 where it lands: never valid JSON
        path.write_bytes(bytes(damaged))
        os.chmod(path, 0o600)
        before = os.stat(path)
        with pytest.raises(StateError) as caught:
            _opened(state_dir)
        assert str(caught.value) == "state: activity.jsonl is corrupt at line 3", offset
        assert caught.value.exit_code == 4
        assert path.read_bytes() == bytes(damaged), offset
        after = os.stat(path)
        assert (after.st_size, after.st_mtime_ns, after.st_mode) == (
            before.st_size,
            before.st_mtime_ns,
            before.st_mode,
        )
    assert _open_fds() == fds  # a refused open does not leak its descriptors


@pytest.mark.parametrize(
    ("bad", "line"),
    [
        (b"\n", 2),
        (b"not json\n", 2),
        (b"[1,2]\n", 2),
        (b'{"no_type":1}\n', 2),
        (b'{"type":7}\n', 2),
        (b'"started"\n', 2),
    ],
)
def test_other_bad_lines_followed_by_good_ones_are_corruption(
    state_dir: Path, bad: bytes, line: int
) -> None:
    data = SAMPLE[0] + bad + SAMPLE[1]
    (state_dir / "activity.jsonl").write_bytes(data)
    with pytest.raises(StateError) as caught:
        _opened(state_dir)
    assert str(caught.value) == f"state: activity.jsonl is corrupt at line {line}"
    assert (state_dir / "activity.jsonl").read_bytes() == data


def test_corrupt_first_line(state_dir: Path) -> None:
    data = b"{garbage\n" + SAMPLE[0]
    (state_dir / "activity.jsonl").write_bytes(data)
    with pytest.raises(StateError) as caught:
        _opened(state_dir)
    assert str(caught.value) == "state: activity.jsonl is corrupt at line 1"


def test_scan_reports_the_good_prefix() -> None:
    data = _journal(*SAMPLE) + b'{"type":"sta'
    found = scan(data)
    assert found.good_length == len(data) - len(b'{"type":"sta')
    assert found.torn_bytes == len(b'{"type":"sta')
    assert [event["type"] for event in found.events] == [
        "started",
        "cycle_started",
        "model_completed",
        "cost_reserved",
        "cost_released",
    ]
