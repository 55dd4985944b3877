"""`singularity sanctum init | wake | ls | grep | show | tend`, all with `--state-dir`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.support.loop_http import Result
from tests.support.sanctum import fixture_sanctum, wake_lines


def test_init_creates_finishes_and_then_leaves_alone(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    sanctum = tmp_path / "b" / "sanctum"
    first = cli("sanctum", "init", "--state-dir", "b", "--agent-name", "Sage")
    assert (first.code, first.out) == (0, f"created the sanctum at {sanctum}\n")
    assert "- Name: Sage (configured" in (sanctum / "PERSONA.md").read_text()
    (sanctum / "BOND.md").unlink()
    second = cli("sanctum", "init", "--state-dir", "b")
    assert second.out == f"finished the sanctum at {sanctum}: filled BOND.md\n"
    third = cli("sanctum", "init", "--state-dir", "b", "--pulse")
    assert third.out == f"already born: {sanctum} (added PULSE.md)\n"
    assert not (tmp_path / "b" / "state.json").exists()


def test_wake_prints_the_wake_text(tmp_path: Path, cli: Callable[..., Result]) -> None:
    (tmp_path / "b").mkdir()
    root = fixture_sanctum(tmp_path / "b", "sessions", "pending")
    result = cli("sanctum", "wake", "--state-dir", "b")
    expected = [line.replace("<sanctum>", str(root)) for line in wake_lines(root)]
    assert result.out.rstrip("\n").split("\n") == expected
    assert cli("sanctum", "wake", "--pulse", "--state-dir", "b").out.startswith("MODE: PULSE\n")
    missing = cli("sanctum", "wake", "--state-dir", "nobody")
    assert missing.out.startswith(f"MODE: FIRST_BREATH\nNO SANCTUM at {tmp_path}/nobody/sanctum\n")


def test_ls_grep_show(tmp_path: Path, cli: Callable[..., Result]) -> None:
    (tmp_path / "b").mkdir()
    fixture_sanctum(tmp_path / "b", "sessions")
    assert cli("sanctum", "ls", "memory", "--state-dir", "b").out == (
        "people/ (1 files)\nsessions/ (3 files)\n"
    )
    assert cli("sanctum", "ls", "memory/sessions", "--state-dir", "b").out.split("\n")[0] == (
        "2026-10-05-launch.md (22 bytes)"
    )
    assert cli("sanctum", "grep", "partner", "--state-dir", "b").out == (
        "memory/people/ruben.md:3: BODY-4 partner, prefers mornings.\n"
    )
    assert cli("sanctum", "show", "memory/people/ruben.md", "--state-dir", "b").out == (
        "# Ruben\n\nBODY-4 partner, prefers mornings.\n"
    )
    escape = cli("sanctum", "show", "../state.json", "--state-dir", "b")
    assert escape.code == 4
    assert escape.err == (
        "singularity: state: sanctum: path must contain only relative normal components "
        "(sanctum_boundary)\n"
    )
    assert cli("sanctum", "ls", "--state-dir", "nobody").code == 4


def test_tend_shows_and_stamps(tmp_path: Path, cli: Callable[..., Result]) -> None:
    (tmp_path / "b").mkdir()
    root = fixture_sanctum(tmp_path / "b", "sessions", "raw")
    assert cli("sanctum", "tend", "--state-dir", "b").out == (
        "Never tended; session notes: 3\nundistilled raw files: 2\ntending due\n"
    )
    stamped = json.loads(cli("sanctum", "tend", "--stamp", "--state-dir", "b").out)
    day = (root / "memory" / ".tended").read_text().strip()
    assert stamped["tended"] == day and stamped["session_notes"] == 3
    assert cli("sanctum", "tend", "--state-dir", "b").out.endswith("nothing to tend\n")
