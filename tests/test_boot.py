"""The boot matrix and the resume gate (spec §4; decisions 1, 13).

Contract: no state and no `--resume` → a new being from configuration; `--resume`
without state, state without `--resume`, and a resumed identity that differs in any
field are refused with their exact messages (exit 4) and change nothing on disk; on
resume the stored being is used and the configured starting balance and model are
ignored.
"""

from __future__ import annotations

import os
import stat
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.domain import events
from singularity.domain.mind import initial_prompt
from singularity.errors import JsonFailure, StateError
from singularity.runtime.being import LiveBeing, open_being

T0 = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)
T1 = datetime(2026, 1, 3, 0, 0, 0, tzinfo=UTC)

IDENTITY_CHANGES = [
    ("agent_id", "other-id"),
    ("agent_name", "OtherName"),
    ("agent_ticker", "OTHER"),
    ("agent_type", "specialist"),
    ("specialty", "gardening"),
    ("role", "child"),
    ("environment", "prod"),
    ("host", "elsewhere"),
    ("workload_id", "w-2"),
    ("workload_public_key", "1" * 64),
    ("executable_digest", "2" * 64),
    ("code_digest", "3" * 64),
    ("policy_digest", "4" * 64),
    ("policy_sequence", "1"),
]


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _flags(state_dir: Path, **extra: object) -> dict[str, object | None]:
    return {"state_dir": str(state_dir), **extra}


def _open(state_dir: Path, *, resume: bool, **extra: object) -> LiveBeing:
    settings = resolve(_flags(state_dir, resume=resume or None, **extra), environ={})
    return open_being(settings, clock=lambda: T1)


def _snapshot(root: Path) -> dict[str, tuple[int, int, bytes | None]]:
    """Every entry under root with its mode, inode and content."""
    found: dict[str, tuple[int, int, bytes | None]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = os.lstat(path)
            content = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
            found[str(path.relative_to(root))] = (info.st_mode, info.st_ino, content)
    return found


def _create(state_dir: Path, **extra: object) -> bytes:
    """Boot a new being, journal and save it as the runtime does, close; its state bytes."""
    settings = resolve(_flags(state_dir, **extra), environ={})
    being = open_being(settings, clock=lambda: T0)
    being.journal(events.Started(being.now()))
    being.state.status = "running"
    being.save()
    being.state.cycle = 3
    being.state.mind.rules.append("kept across resumes")
    being.state.budget.remaining = Decimal("7.25")
    being.journal(events.Stopped(being.now(), 3, "stopped"))
    being.state.status = "stopped"
    being.checkpoint()  # a clean stop: state.json alone is current
    being.close()
    return (state_dir / "state.json").read_bytes()


def _refused(state_dir: Path, message: str, *, resume: bool, **extra: object) -> None:
    with pytest.raises(StateError) as caught:
        _open(state_dir, resume=resume, **extra)
    assert str(caught.value) == message
    assert caught.value.exit_code == 4


# --- row 1: no state, no --resume --------------------------------------------------------


def test_new_being_from_configuration(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    being = _open(
        state_dir,
        resume=False,
        agent_name="Nova",
        specialty="cartography",
        starting_balance="3.50",
        brama_model="vendor/model-a",
        policy_sequence="9",
    )
    try:
        assert being.created is True
        state = being.state
        assert state.schema_version == "being-v1"
        assert state.identity.name == "Nova"
        assert state.identity.agent_id == "local"
        assert state.identity.policy_sequence == 9
        assert state.mind.system_prompt == initial_prompt("Nova", "cartography")
        assert state.mind.current_model == "vendor/model-a"
        assert state.budget.starting == Decimal("3.50")
        assert state.budget.remaining == Decimal("3.50")
        assert state.budget.api_spent == Decimal(0)
        assert state.cycle == 0
        assert state.conversation == [] and state.recent_actions == []
        assert state.started_at == state.updated_at == "2026-01-03T00:00:00Z"
        assert not (state_dir / "state.json").exists()  # not saved until boot finishes
    finally:
        being.close()


def test_new_being_with_no_flags_at_all_uses_the_local_identity(tmp_path: Path) -> None:
    being = open_being(resolve({}, environ={}), clock=lambda: T0)
    try:
        identity = being.state.identity
        assert (identity.agent_id, identity.role, identity.environment) == (
            "local",
            "being",
            "local",
        )
        assert (identity.host, identity.workload_id) == ("localhost", "local")
        assert identity.code_digest == "0" * 64
        assert identity.policy_sequence == 0
        assert being.statedir.path == ".singularity"
    finally:
        being.close()
    assert (tmp_path / ".singularity").is_dir()


# --- row 2: no state, --resume -----------------------------------------------------------


def test_resume_without_state_is_refused(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _refused(state_dir, "state: resume requested but no state exists", resume=True)
    assert not (state_dir / "state.json").exists()
    assert not (state_dir / "activity.jsonl").exists()


def test_resume_without_state_in_an_existing_directory_changes_nothing(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    (state_dir / "lock").write_bytes(b"")
    os.chmod(state_dir / "lock", 0o600)
    before = _snapshot(state_dir)
    _refused(state_dir, "state: resume requested but no state exists", resume=True)
    assert _snapshot(state_dir) == before


# --- row 3: state, no --resume -----------------------------------------------------------


def test_existing_state_without_resume_is_refused(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _create(state_dir)
    before = _snapshot(state_dir)
    _refused(
        state_dir,
        f"state: state already exists at {state_dir}/state.json; use --resume or a new directory",
        resume=False,
    )
    assert _snapshot(state_dir) == before


def test_the_message_uses_the_directory_as_configured(tmp_path: Path) -> None:
    _create(tmp_path / "rel")
    with pytest.raises(StateError) as caught:
        open_being(resolve({"state_dir": "rel"}, environ={}))
    assert str(caught.value) == (
        "state: state already exists at rel/state.json; use --resume or a new directory"
    )


# --- row 4: state, --resume ----------------------------------------------------------------


def test_resume_with_matching_identity_continues_the_stored_being(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state_dir = tmp_path / "state"
    saved = _create(state_dir)
    being = _open(state_dir, resume=True)
    try:
        assert being.created is False
        assert being.state.to_json() == saved
        assert being.state.cycle == 3
        assert being.state.mind.rules == ["kept across resumes"]
        assert [event["type"] for event in being.events_at_open] == [
            "started",
            "stopped",
        ]
        assert "activity.jsonl" not in caplog.text  # nothing to repair
    finally:
        being.close()
    assert (state_dir / "state.json").read_bytes() == saved  # opening alone writes nothing


def test_resume_through_the_environment_variable(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    saved = _create(state_dir)
    settings = resolve(
        {}, environ={"SINGULARITY_STATE_DIR": str(state_dir), "SINGULARITY_RESUME": "true"}
    )
    being = open_being(settings)
    try:
        assert being.state.to_json() == saved
    finally:
        being.close()


def test_resume_ignores_the_configured_balance_and_model(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _create(state_dir, starting_balance="10", brama_model="model-at-birth")
    being = _open(state_dir, resume=True, starting_balance="999", brama_model="model-now")
    try:
        assert being.state.budget.starting == Decimal("10")
        assert being.state.budget.remaining == Decimal("7.25")
        assert being.state.mind.current_model == "model-at-birth"
    finally:
        being.close()


@pytest.mark.parametrize(("field", "value"), IDENTITY_CHANGES, ids=[f for f, _ in IDENTITY_CHANGES])
def test_resume_with_any_identity_field_changed_is_refused_and_changes_nothing(
    tmp_path: Path, field: str, value: str
) -> None:
    state_dir = tmp_path / "state"
    _create(state_dir)
    leftover = state_dir / f".state-{uuid.uuid4()}.tmp"  # would be removed by a real boot
    leftover.write_bytes(b"{")
    (state_dir / "activity.jsonl").open("ab").write(b'{"type":"cyc')  # a torn tail
    before = _snapshot(state_dir)

    _refused(
        state_dir,
        "state: resume identity does not match configuration",
        resume=True,
        **{field: value},
    )

    assert _snapshot(state_dir) == before
    being = _open(state_dir, resume=True)  # the refused boot released the lock
    being.close()


def test_every_identity_field_is_covered_by_the_mismatch_test() -> None:
    from singularity.domain.identity import Identity

    stored_names = {
        "name": "agent_name",
        "ticker": "agent_ticker",
    }
    identity_fields = {stored_names.get(name, name) for name in Identity.model_fields}
    assert identity_fields == {field for field, _ in IDENTITY_CHANGES}


def test_identity_comparison_is_exact(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _create(state_dir, agent_name="Nova")
    _refused(
        state_dir,
        "state: resume identity does not match configuration",
        resume=True,
        agent_name="nova",
    )
    _refused(
        state_dir,
        "state: resume identity does not match configuration",
        resume=True,
        agent_name="Nova ",
    )


def test_resume_of_a_newer_schema_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    saved = _create(state_dir)
    (state_dir / "state.json").write_bytes(saved.replace(b'"being-v1"', b'"being-v2"'))
    before = _snapshot(state_dir)
    _refused(state_dir, "state: unsupported state schema being-v2", resume=True)
    assert _snapshot(state_dir) == before


def test_resume_of_malformed_state_is_a_json_failure(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    saved = _create(state_dir)
    (state_dir / "state.json").write_bytes(saved[:-10])
    before = _snapshot(state_dir)
    with pytest.raises(JsonFailure) as caught:
        _open(state_dir, resume=True)
    assert caught.value.exit_code == 5
    assert _snapshot(state_dir) == before


def test_resume_repairs_a_torn_journal_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state_dir = tmp_path / "state"
    _create(state_dir)
    journal = (state_dir / "activity.jsonl").read_bytes()
    (state_dir / "activity.jsonl").write_bytes(journal + b'{"type":"cycle_sta')
    being = _open(state_dir, resume=True)
    try:
        torn = len(b'{"type":"cycle_sta')
        assert f"cut a torn last line of {torn} bytes from activity.jsonl" in caplog.text
    finally:
        being.close()
    assert (state_dir / "activity.jsonl").read_bytes() == journal


def test_resume_with_a_corrupt_journal_is_refused(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _create(state_dir)
    journal = (state_dir / "activity.jsonl").read_bytes()
    corrupt = b"{oops\n" + journal
    (state_dir / "activity.jsonl").write_bytes(corrupt)
    _refused(state_dir, "state: activity.jsonl is corrupt at line 1", resume=True)
    assert (state_dir / "activity.jsonl").read_bytes() == corrupt
    assert (state_dir / "state.json").exists()


def test_a_refused_resume_over_a_corrupt_journal_changes_nothing_at_all(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    _create(state_dir)
    journal = (state_dir / "activity.jsonl").read_bytes()
    (state_dir / "activity.jsonl").write_bytes(b"{oops\n" + journal)
    (state_dir / f".state-{uuid.uuid4()}.tmp").write_bytes(b"{")
    before = _snapshot(state_dir)
    with pytest.raises(StateError):
        _open(state_dir, resume=True)
    assert _snapshot(state_dir) == before
