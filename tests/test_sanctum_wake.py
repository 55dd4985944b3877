"""The wake text (spec A.6, caps of C.4), asserted line for line on fixture sanctums."""

from __future__ import annotations

from pathlib import Path

import pytest

from singularity.sanctum.wake import IDENTITY_CAP, SECTION_CAP, cut
from tests.support.sanctum import fixture_sanctum, identity_lines, wake_lines

FIRST_BREATH = (
    "This is your First Breath. The runtime seeds the missing identity files when the being "
    "starts (or run `singularity sanctum init`); then fill their {…} placeholders from your "
    "identity and what you decide."
)
HEAD = ["MODE: WAKING", "Sanctum: <sanctum>", ""]


def no_body(lines: list[str]) -> None:
    assert not [line for line in lines if "BODY-" in line]


def test_no_sanctum_is_a_first_breath() -> None:
    assert wake_lines(None) == ["MODE: FIRST_BREATH", "NO SANCTUM at <sanctum>", FIRST_BREATH]


def test_an_empty_folder_is_no_sanctum(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, identity=False)
    assert wake_lines(root) == ["MODE: FIRST_BREATH", "NO SANCTUM at <sanctum>", FIRST_BREATH]


def test_a_cut_off_birth_names_what_is_missing(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "cut-off", identity=False)
    assert wake_lines(root) == [
        "MODE: FIRST_BREATH",
        "INCOMPLETE SANCTUM at <sanctum>: missing BOND.md, HOW-I-REMEMBER.md, CAPABILITIES.md",
        FIRST_BREATH,
    ]


def test_a_born_sanctum_with_nothing_remembered(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path)
    (root / "memory" / "sessions").mkdir(parents=True)
    (root / "raw").mkdir()
    assert wake_lines(root) == [
        *HEAD,
        *identity_lines(),
        "===== memory map =====",
        "(empty: nothing remembered yet)",
        "Never tended; session notes: 0",
    ]


def test_session_notes_before_any_tending(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "sessions")
    lines = wake_lines(root)
    assert lines == [
        *HEAD,
        *identity_lines(),
        "===== memory map =====",
        "memory/people/ (1 files)",
        "memory/sessions/ (3 files)",
        "Newest:",
        "memory/sessions/2026-10-05-launch.md",
        "memory/sessions/2026-10-03-pricing.md",
        "memory/sessions/2026-10-01-first-breath.md",
        "Never tended; session notes: 3",
    ]
    no_body(lines)


def test_session_notes_since_the_stamp(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "sessions")
    (root / "memory" / ".tended").write_text("2026-10-02\n")
    lines = wake_lines(root)
    assert lines[-7:] == [
        "memory/people/ (1 files)",
        "memory/sessions/ (3 files)",
        "Newest:",
        "memory/sessions/2026-10-05-launch.md",
        "memory/sessions/2026-10-03-pricing.md",
        "memory/sessions/2026-10-01-first-breath.md",
        "Tended: 2026-10-02; session notes since: 2",
    ]
    (root / "memory" / ".tended").write_text("2026-10-05\n")
    assert wake_lines(root)[-1] == "Tended: 2026-10-05; session notes since: 0"
    no_body(lines)


def test_undistilled_raw_files(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "raw")
    lines = wake_lines(root)
    assert lines[lines.index("===== memory map =====") :] == [
        "===== memory map =====",
        "memory/topics/ (1 files)",
        "raw/ (2 files)",
        "raw/calls/ (1 files)",
        "Undistilled raw (2):",
        "raw/2026-10-02-oss-call.md",
        "raw/calls/2026-10-06-vendor-call.txt",
        "Never tended; session notes: 0",
    ]
    no_body(lines)


def test_a_raw_status_past_2000_characters_is_not_seen(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "raw")
    (root / "raw" / "2026-10-08-late-status.md").write_text("x" * 2000 + "\nstatus: raw\n")
    assert "raw/2026-10-08-late-status.md" not in wake_lines(root)


def test_pending_items_are_shown_whole(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "pending")
    lines = wake_lines(root)
    assert lines[lines.index("===== memory map =====") :] == [
        "===== memory map =====",
        "memory/ (1 files)",
        "memory/topics/ (1 files)",
        "Never tended; session notes: 0",
        "",
        "===== pending.md =====",
        "- Ask about the launch date.",
        "- Raise the price question.",
    ]
    no_body(lines)
    (root / "memory" / "pending.md").write_text("  \n\n")
    assert "===== pending.md =====" not in wake_lines(root)


def test_only_the_eight_newest_dated_files(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "many")
    lines = wake_lines(root)
    assert lines[lines.index("===== memory map =====") :] == [
        "===== memory map =====",
        "memory/ (2 files)",
        "memory/decisions/ (3 files)",
        "memory/sessions/ (5 files)",
        "memory/topics/ (2 files)",
        "memory/topics/deep/ (1 files)",
        "Newest:",
        "memory/decisions/2026-09-12-vendor.md",
        "memory/2026-09-11-loose-event.md",
        "memory/sessions/2026-09-10-e.md",
        "memory/sessions/2026-09-10-d.md",
        "memory/topics/2026-09-09-market.md",
        "memory/topics/deep/2026-09-08-nested.md",
        "memory/decisions/2026-09-05-price.md",
        "memory/sessions/2026-09-03-c.md",
        "Never tended; session notes: 5",
    ]
    no_body(lines)


def test_pulse_mode_appends_pulse_md_when_it_exists(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path)
    lines = wake_lines(root, pulse=True)
    assert lines[0] == "MODE: PULSE"
    assert "===== PULSE.md =====" not in lines
    (root / "PULSE.md").write_text("# Pulse\n\n- Frequency: 6h\n")
    lines = wake_lines(root, pulse=True)
    at = lines.index("===== PULSE.md =====")
    assert lines[at - 2 : at + 5] == [
        "| SANCTUM | Sanctum | this memory |",
        "",
        "===== PULSE.md =====",
        "# Pulse",
        "",
        "- Frequency: 6h",
        "",
    ]
    assert "===== PULSE.md =====" not in wake_lines(root)


def test_placeholders_left_in_identity_files_are_reported(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path)
    (root / "CREED.md").write_text("# Creed\n\n{your mission}\n{your values}\n")
    (root / "BOND.md").write_text('# Bond\n\n{"json": "is not a placeholder"}\n{who you serve}\n')
    assert wake_lines(root)[-2:] == [
        "Never tended; session notes: 0",
        "First Breath unfinished: placeholders in CREED.md (2), BOND.md (1)",
    ]


def test_an_oversized_identity_file_is_cut_with_a_marker(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path)
    (root / "PERSONA.md").write_text("# Persona\n" + "é" * IDENTITY_CAP)
    lines = wake_lines(root)
    at = lines.index("===== PERSONA.md =====")
    assert len("\n".join(lines[at + 1 : at + 3]).encode()) <= IDENTITY_CAP
    assert lines[at + 3] == (
        "[cut: PERSONA.md is over 16 KiB; split it: keep what is true now, move the rest "
        "to memory files]"
    )
    assert lines[at + 5] == "===== CREED.md ====="


def test_the_whole_text_is_capped(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path)
    for name in ("PERSONA.md", "CREED.md", "BOND.md", "HOW-I-REMEMBER.md", "CAPABILITIES.md"):
        (root / name).write_text("x" * (IDENTITY_CAP - 10))
    text = "\n".join(wake_lines(root))
    assert len(text.encode()) <= SECTION_CAP + 200
    assert text.endswith(
        "[cut: the sanctum section is over 64 KiB; shorten the largest identity files]"
    )


def test_cut_keeps_whole_characters() -> None:
    assert cut("abc", 3, "m") == "abc"
    assert cut("aé", 2, "m") == "a\n[m]"


def test_the_map_never_shows_a_body_however_many_files(tmp_path: Path) -> None:
    root = fixture_sanctum(tmp_path, "many", "sessions", "raw", "pending")
    for number in range(300):
        (root / "memory" / "topics" / f"subject-{number}.md").write_text(f"BODY-x{number}\n")
    lines = wake_lines(root)
    no_body(lines)
    assert "memory/topics/ (304 files)" in lines


def test_the_map_cache_reads_again_only_the_folders_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from singularity.sanctum import scan
    from singularity.sanctum.store import SanctumStore
    from singularity.sanctum.wake import scan_map

    root = fixture_sanctum(tmp_path, "many", "raw")
    read: list[str] = []
    summarize = scan.summarize

    def counting(path: str, dir_fd: int, *, raw: bool) -> scan.FolderScan:
        read.append(path)
        return summarize(path, dir_fd, raw=raw)

    monkeypatch.setattr(scan, "summarize", counting)
    store = SanctumStore(str(root))
    cache = scan.MapCache()
    monkeypatch.setattr(scan, "RACY_NS", 10**18)  # every folder just changed: never reused
    first = scan_map(store, cache)
    scan_map(store, cache)
    assert len(read) == 2 * 7
    monkeypatch.setattr(scan, "RACY_NS", -1)
    read.clear()
    assert scan_map(store, cache) == first
    assert scan_map(store, cache) == first
    assert len(read) == 7
    read.clear()
    (root / "memory" / "sessions" / "2026-09-30-late.md").write_text("BODY-x\n")
    (root / "raw" / "2026-10-09-new-call.md").write_text("status: raw\n")
    again = scan_map(store, cache)
    assert sorted(read) == ["memory/sessions/", "raw/"]
    assert again.session_notes == first.session_notes + 1
    assert again.undistilled == (
        *first.undistilled[:1],
        "raw/2026-10-09-new-call.md",
        *first.undistilled[1:],
    )
    assert again.newest[0] == "memory/sessions/2026-09-30-late.md"
    store.close()
