"""Birth of a sanctum: created, finished after a cut-off birth, or left alone once born."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.domain.identity import identity_from
from singularity.domain.records import MemoryEntry
from singularity.sanctum.extension import SanctumCore
from singularity.sanctum.layout import Seed, initialize, placeholders
from singularity.sanctum.names import IO, SanctumRefusal
from singularity.sanctum.store import SanctumStore, ensure_root
from singularity.storage import fsio
from tests.support.sanctum import IDENTITY, fake_core, fixture_sanctum, snapshot, wake_lines

SEED = Seed(
    identity_from(
        resolve(
            {"agent_name": "Sage", "agent_ticker": "SAGE", "specialty": "bookkeeping"}, environ={}
        )
    ),
    "2026-10-01",
)


def birth(root: Path, seed: Seed = SEED) -> tuple[str, list[str]]:
    ensure_root(str(root))
    store = SanctumStore(str(root))
    try:
        done = initialize(store, seed)
    finally:
        store.close()
    return done.outcome, done.filled


def test_a_new_sanctum_is_created_owner_only(tmp_path: Path) -> None:
    root = tmp_path / "state" / "sanctum"
    assert birth(root) == ("created", list(IDENTITY))
    found = snapshot(root)
    assert sorted(found) == sorted([*IDENTITY, "memory", "memory/sessions", "raw", "capabilities"])
    for name, (kind, _, mode) in found.items():
        assert mode == (0o700 if kind == "dir" else 0o600), name
    assert root.stat().st_mode & 0o777 == 0o700
    persona = (root / "PERSONA.md").read_text()
    assert "- Name: Sage (configured; it does not change)" in persona
    assert "- Ticker: SAGE; kind: general; specialty: bookkeeping" in persona
    assert "- Born: 2026-10-01" in persona and "| 2026-10-01 | Born | First start |" in persona
    assert "the value you create in bookkeeping" in (root / "CREED.md").read_text()
    assert "friend" not in (root / "BOND.md").read_text()
    assert not (root / "PULSE.md").exists()


def test_the_seeds_leave_first_breath_to_the_being(tmp_path: Path) -> None:
    root = tmp_path / "sanctum"
    birth(root)
    lines = wake_lines(root)
    assert lines[0] == "MODE: WAKING"
    assert lines[-3:] == [
        "(empty: nothing remembered yet)",
        "Never tended; session notes: 0",
        "First Breath unfinished: placeholders in PERSONA.md (3), CREED.md (2), BOND.md (1)",
    ]
    for name in ("HOW-I-REMEMBER.md", "CAPABILITIES.md"):
        assert placeholders((root / name).read_text()) == 0


def test_a_cut_off_birth_is_finished_and_what_existed_is_kept(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "cut-off", identity=False)
    before = {name: (root / name).read_bytes() for name in ("PERSONA.md", "CREED.md")}
    assert wake_lines(root)[0] == "MODE: FIRST_BREATH"
    assert birth(root) == ("finished", ["BOND.md", "HOW-I-REMEMBER.md", "CAPABILITIES.md"])
    assert {name: (root / name).read_bytes() for name in before} == before
    assert wake_lines(root)[0] == "MODE: WAKING"


def test_a_born_sanctum_is_left_alone(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "sessions")
    birth(root)
    (root / "BOND.md").write_text("# Bond\n\nCall them: Ann\n")
    before = snapshot(root)
    assert birth(root) == ("born", [])
    assert snapshot(root) == before


def test_pulse_md_is_seeded_only_when_pulse_is_on(tmp_path: Path) -> None:
    root = tmp_path / "sanctum"
    birth(root)
    seed = Seed(SEED.identity, SEED.born, ("2h", "22:00-07:00 UTC"))
    assert birth(root, seed) == ("born", ["PULSE.md"])
    text = (root / "PULSE.md").read_text()
    assert "- Frequency: 2h\n- Quiet hours: 22:00-07:00 UTC\n" in text
    assert birth(root, seed) == ("born", [])


def test_an_identity_symlink_counts_as_present_and_is_never_replaced(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "cut-off", identity=False)
    os.symlink("/etc/hostname", root / "BOND.md")
    assert birth(root) == ("finished", ["HOW-I-REMEMBER.md", "CAPABILITIES.md"])
    assert os.readlink(root / "BOND.md") == "/etc/hostname"
    assert "(unreadable: path leaves the sanctum)" in wake_lines(root)


def test_a_failed_birth_is_finished_by_the_next_one(tmp_path: Path) -> None:
    root = tmp_path / "sanctum"
    fsio.arm_failpoints("sanctum.fsync=eio@3")
    try:
        with pytest.raises(SanctumRefusal) as raised:
            birth(root)
    finally:
        fsio.arm_failpoints("")
    assert raised.value.code == IO
    assert sorted(path.name for path in root.iterdir() if path.is_file()) == [
        "CREED.md",
        "PERSONA.md",
    ]
    assert birth(root) == ("finished", ["BOND.md", "HOW-I-REMEMBER.md", "CAPABILITIES.md"])


def test_a_symlinked_sanctum_is_refused_and_the_being_lives_without_it(tmp_path: Path) -> None:
    core, host = fake_core(tmp_path)
    os.symlink(tmp_path, tmp_path / "state" / "sanctum")
    asyncio.run(core.at_boot())
    assert host.events[-1]["type"] == "warning"
    assert "sanctum must not be a symlink" in host.events[-1]["message"]
    assert core.prompt_section().startswith("\n\nSanctum:\n(unavailable: state: sanctum must not")
    outcome = asyncio.run(core.toolsets()[0].call("singularity_sanctum_read", {"path": "BOND.md"}))
    assert outcome.error_code == "sanctum_unavailable"


def test_boot_journals_what_it_did(tmp_path: Path) -> None:
    core, host = fake_core(tmp_path)
    asyncio.run(core.at_boot())
    assert host.events == [
        {
            "type": "sanctum_initialized",
            "at": "2026-10-07T12:00:00Z",
            "outcome": "created",
            "filled": list(IDENTITY),
        }
    ]
    again, host = fake_core(tmp_path)
    asyncio.run(again.at_boot())
    assert host.events[0]["outcome"] == "born"
    section = again.prompt_section()
    assert section.startswith("\n\nSanctum:\nYour sanctum: your long-form memory as small")
    assert (
        "First Breath is not finished: replace the {…} placeholders in PERSONA.md, CREED.md, "
        "BOND.md with what you decide" in section
    )


def test_verify_checks_the_sanctum_folder(tmp_path: Path) -> None:
    from singularity.runtime.inspect.verify import Findings, _check_entries

    def problems(fd: int) -> list[str]:
        found = Findings()
        _check_entries(fd, found)
        return found.problems

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    fd = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        (state / "sanctum").mkdir(mode=0o700)
        assert problems(fd) == []
        (state / "sanctum").chmod(0o755)
        assert problems(fd) == ["sanctum has mode 755; expected 700 at most"]
        (state / "sanctum").rmdir()
        os.symlink(tmp_path, state / "sanctum")
        assert problems(fd) == ["sanctum is not a directory"]
    finally:
        os.close(fd)


def test_an_unreadable_folder_never_fails_a_request(tmp_path: Path) -> None:
    core, _ = fake_core(tmp_path)
    asyncio.run(core.at_boot())

    def refuse(*_: object, **__: object) -> None:
        raise SanctumRefusal(IO, "[Errno 13] Permission denied")

    core.store.walk = refuse  # type: ignore[method-assign,union-attr]
    core.invalidate()
    assert core.prompt_section() == "\n\nSanctum:\n(unavailable: [Errno 13] Permission denied)"
    outcome = asyncio.run(core.toolsets()[0].call("singularity_sanctum_wake", {}))
    assert (outcome.error_code, outcome.content) == (
        IO,
        {"message": "[Errno 13] Permission denied"},
    )


def test_the_section_follows_the_sanctum_and_asks_for_tending(tmp_path: Path) -> None:
    core, _ = fake_core(tmp_path)
    asyncio.run(core.at_boot())
    root = tmp_path / "state" / "sanctum"
    first = core.prompt_section()
    assert core.prompt_section() is first  # cached while nothing changed
    assert "Tend first" not in first
    (root / "PERSONA.md").write_text("# Persona\n\nEdited by the operator.\n")
    edited = core.prompt_section()
    assert "Edited by the operator." in edited and "Tend first" not in edited
    (root / "memory" / "sessions" / "2026-10-06-talk.md").write_text("talked\n")
    core.invalidate()  # as every cycle boundary does
    assert "Tend first: there are session notes since the last tending" in core.prompt_section()
    done = asyncio.run(core.toolsets()[0].call("singularity_sanctum_tended", {}))
    assert done.content["tended"] == "2026-10-07"
    assert "Tend first" not in core.prompt_section()


def _memory(index: int, text: str) -> MemoryEntry:
    return MemoryEntry(
        id=f"00000000-0000-4000-8000-{index:012d}",
        kind="note",
        text=text,
        created_at="2026-10-01T00:00:00Z",
        sources=[],
    )


def test_the_room_follows_the_minds_sections_as_they_change(tmp_path: Path) -> None:
    core, host = fake_core(tmp_path, context_tokens="40000")
    rooms = [core.room()]
    texts = ['a "quoted"\nline\x01 ' * 300, "zażółć " * 900, "short"]
    for index, text in enumerate(texts * 10):
        mind = host.state.mind
        host.state.mind = mind.model_copy(
            update={"memories": [*mind.memories, _memory(index, text)]}
        )
        rooms.append(core.room())
        assert rooms[-1] == SanctumCore(host, core.config).room()  # one measuring afresh
    host.state.mind = host.state.mind.model_copy(update={"rules": ["a new rule"]})
    assert core.room() == SanctumCore(host, core.config).room()
    assert rooms[0] > rooms[3] > rooms[-1]  # the memories take room from the sanctum
