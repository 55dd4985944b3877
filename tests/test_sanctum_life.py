"""The sanctum in ordinary life, through the CLI and a being's tools on the scripted gateway.

Hand-edited identity files are shown cut to their bound, never dropped; hand-made memory
files with names of their own can be replaced and merged by the being; a map cut at its
cap keeps the lines the being acts on.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from singularity.mind.context import estimate_tokens
from singularity.sanctum.wake import IDENTITY_CAP, MAP_CAP
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import Result, all_events, cli_args


def _once(cli: Any, root: Path, turns: list[Turn], *extra: str) -> tuple[Result, list[Any]]:
    resume = ["--resume"] if (root / "being" / "state.json").exists() else []
    with ScriptedServer([*turns, Turn.text("done")]) as server:
        result: Result = cli(
            "once", *cli_args(root, server, "--max-tool-rounds", "20", *resume, *extra)
        )
        requests = [request.json for request in server.completions]
    assert result.code == 0, result.err
    return result, requests


def _born(cli: Any, root: Path) -> Path:
    _once(cli, root, [])
    return root / "being" / "sanctum"


def _wake(cli: Any, root: Path) -> str:
    result = cli("sanctum", "wake", "--state-dir", str(root / "being"))
    assert result.code == 0, result.err
    return str(result.out)


def test_a_hand_edited_identity_file_is_shown_cut_to_its_bound(tmp_path: Path, cli: Any) -> None:
    sanctum = _born(cli, tmp_path)
    persona = (sanctum / "PERSONA.md").read_bytes()
    (sanctum / "PERSONA.md").write_bytes(persona.replace(b"# Persona", b"# Pers\xffona"))
    (sanctum / "CREED.md").write_text("# Creed\n\n" + "All my standing orders. " * 12_000)
    text = _wake(cli, tmp_path)
    assert "(unreadable" not in text
    assert "[PERSONA.md holds bytes that are not UTF-8, shown as \ufffd; rewrite it]" in text
    assert "# Pers\ufffdona" in text
    creed = text[text.index("===== CREED.md =====") : text.index("===== BOND.md =====")]
    assert creed.count("All my standing orders.") > 100
    assert len(creed.encode()) <= IDENTITY_CAP + 200
    assert "[cut: CREED.md is over 16 KiB; split it" in creed
    # The being sees the same in its system message, and can rewrite the file.
    _, requests = _once(
        cli,
        tmp_path,
        [
            Turn.tool_call(
                "singularity_sanctum_write", {"path": "PERSONA.md", "content": "# Persona\n"}
            )
        ],
    )
    assert "# Pers\ufffdona" in requests[0]["messages"][0]["content"]
    assert (sanctum / "PERSONA.md").read_text() == "# Persona\n"


def test_hand_made_files_with_free_names_can_be_replaced_and_merged(
    tmp_path: Path, cli: Any
) -> None:
    sanctum = _born(cli, tmp_path)
    (sanctum / "memory" / "people").mkdir()
    (sanctum / "memory" / "Notes From Bob.md").write_text("Bob's notes, typed by hand\n")
    (sanctum / "memory" / "people" / "Bob Smith.md").write_text("Bob likes tea\n")
    (sanctum / "memory" / "people" / "bob.md").write_text("# Bob\n\nAn operator.\n")
    turns = [
        Turn.tool_call(
            "singularity_sanctum_write",
            {
                "path": "memory/Notes From Bob.md",
                "content": "Distilled: Bob wants weekly reports\n",
            },
        ),
        Turn.tool_call(
            "singularity_sanctum_merge",
            {
                "keep": "memory/people/bob.md",
                "drop": "memory/people/Bob Smith.md",
                "content": "# Bob\n\nAn operator. Likes tea.\n",
            },
        ),
        Turn.tool_call(
            "singularity_sanctum_write",
            {"path": "memory/Another Free Name.md", "content": "new files keep the rules\n"},
        ),
    ]
    _, requests = _once(cli, tmp_path, turns)
    results = [json.loads(m["content"]) for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert [r["status"] for r in results] == ["success", "success", "failed"]
    assert results[2]["error_code"] == "sanctum_name"
    assert (sanctum / "memory" / "Notes From Bob.md").read_text().startswith("Distilled")
    assert not (sanctum / "memory" / "people" / "Bob Smith.md").exists()
    assert "Likes tea" in (sanctum / "memory" / "people" / "bob.md").read_text()
    merged = [e for e in all_events(tmp_path) if e["type"] == "sanctum_merged"]
    assert merged and merged[0]["drop"] == "memory/people/Bob Smith.md"


def test_a_cut_map_keeps_the_tending_and_first_breath_lines(tmp_path: Path, cli: Any) -> None:
    sanctum = _born(cli, tmp_path)
    for index in range(400):
        folder = sanctum / "memory" / f"kind-with-a-long-descriptive-name-{index:03d}"
        folder.mkdir()
        (folder / "note.md").write_text("x\n")
    text = _wake(cli, tmp_path)
    memory_map = text[text.index("===== memory map =====") :].split("\n", 1)[1]
    memory_map = memory_map.split("\n\n=====", 1)[0].rstrip("\n")
    assert len(memory_map.encode()) <= MAP_CAP
    lines = memory_map.split("\n")
    assert lines[-3] == "[cut: the map is over 8 KiB; use singularity_sanctum_list]"
    assert lines[-2].startswith("Never tended; session notes: ")
    assert lines[-1].startswith("First Breath unfinished: placeholders in PERSONA.md")


def _live_cycles(cli: Any, root: Path, cycles: int) -> None:
    with ScriptedServer() as server:  # every cycle: one model round, a plain answer
        result = cli("run", *cli_args(root, server, "--max-cycles", str(cycles)))
    assert result.code == 0, result.err


@pytest.mark.parametrize(
    "cycles", [pytest.param(120, id="120"), pytest.param(1000, id="1000", marks=pytest.mark.slow)]
)
def test_a_long_life_leaves_few_note_files_in_time_order(
    tmp_path: Path, cli: Any, cycles: int
) -> None:
    _live_cycles(cli, tmp_path, cycles)
    sessions = tmp_path / "being" / "sanctum" / "memory" / "sessions"
    files = sorted(sessions.iterdir(), key=lambda path: path.stat().st_mtime_ns)
    # One file a day, continued past 64 KiB: a handful, never one per cycle.
    assert 1 <= len(files) <= 1 + cycles // 200
    assert all(path.stat().st_size <= 64 * 1024 for path in files)
    text = "".join(path.read_text() for path in files)
    assert [f"## Cycle {n} (" in text for n in range(1, cycles + 1)] == [True] * cycles
    assert text.count("\n## Cycle ") == cycles  # each cycle once
    # The map lists them newest first (by time within the day), the tending line after.
    wake = _wake(cli, tmp_path)
    newest = wake[wake.index("Newest:\n") :].split("\n")[1 : 1 + min(len(files), 8)]
    expected = [f"memory/sessions/{path.name}" for path in reversed(files)][:8]
    assert newest == expected
    assert f"Never tended; session notes: {len(files)}" in wake
    # grep finds the last cycle first, and the first one too.
    last = cli("sanctum", "grep", f"## Cycle {cycles} (", "--state-dir", str(tmp_path / "being"))
    assert last.code == 0 and last.out.startswith(f"{newest[0]}:")
    first = cli("sanctum", "grep", "## Cycle 1 (", "--state-dir", str(tmp_path / "being"))
    assert first.code == 0 and first.out.count("\n") == 1


def _fill_to_the_bounds(sanctum: Path) -> None:
    for name in ("PERSONA.md", "CREED.md", "BOND.md", "HOW-I-REMEMBER.md", "CAPABILITIES.md"):
        (sanctum / name).write_text(f"# {name}\n\n{{a placeholder}}\n" + f"{name} line\n" * 1500)
    (sanctum / "memory" / "pending.md").write_text("- raise this with the operator\n" * 300)
    for index in range(300):
        folder = sanctum / "memory" / f"subject-{index:03d}"
        folder.mkdir()
        (folder / f"2026-10-{1 + index % 28:02d}-event.md").write_text("x\n")


@pytest.mark.parametrize("context", [8192, 4096, 2048])
def test_a_full_sanctum_fits_the_context_budget(tmp_path: Path, cli: Any, context: int) -> None:
    sanctum = _born(cli, tmp_path)
    _fill_to_the_bounds(sanctum)
    _, requests = _once(cli, tmp_path, [], "--context-tokens", str(context))
    system = requests[0]["messages"][0]
    assert estimate_tokens(system) <= context
    text = system["content"]
    assert "\nMODE: WAKING\n" in text
    assert "Tend first" in text and "First Breath is not finished" in text
    assert "\nNever tended; session notes: 1" in text
    assert "\nFirst Breath unfinished: placeholders in PERSONA.md (1)" in text
    # Every identity file has at least its line; they get room in wake order.
    for name in ("PERSONA.md", "CREED.md", "BOND.md", "HOW-I-REMEMBER.md", "CAPABILITIES.md"):
        assert f"===== {name} =====\n" in text
    assert "PERSONA.md line" in text
    if context <= 4096:
        assert "(CAPABILITIES.md not shown: " in text
        assert "read it with singularity_sanctum_read)" in text
    # The whole context is used wisely: the system message takes at most half of it.
    assert estimate_tokens(system) <= context // 2 + 16


def test_map_export_import_memories_and_show(tmp_path: Path, cli: Any) -> None:
    remember = Turn.tool_call(
        "singularity_memory_remember", {"kind": "fact", "text": "the operator likes tea"}
    )
    secret = "a private journal line nobody may print"
    write = Turn.tool_call("singularity_journal_write", {"text": secret})
    _once(cli, tmp_path, [remember, write], "--journal-embedder", "hashing")
    at = ["--state-dir", str(tmp_path / "being")]
    # map: the map alone.
    memory_map = cli("sanctum", "map", *at)
    assert memory_map.code == 0, memory_map.err
    assert memory_map.out.splitlines()[-2].startswith("Never tended; session notes: 1")
    assert "=====" not in memory_map.out
    # import-memories: the mind's memories as raw material, written once.
    imported = cli("sanctum", "import-memories", *at)
    assert imported.code == 0, imported.err
    [path] = json.loads(imported.out)["written"]
    raw = (tmp_path / "being" / "sanctum" / path).read_text()
    assert raw.startswith("---\nstatus: raw\ndistilled_to: []\n---\n")
    assert "[fact] the operator likes tea" in raw
    again = cli("sanctum", "import-memories", *at)
    assert again.code == 4 and "written once" in again.err
    # export: a new 0600 archive of the whole sanctum.
    archive = tmp_path / "sanctum.tar"
    exported = cli("sanctum", "export", str(archive), *at)
    assert exported.code == 0, exported.err
    assert archive.stat().st_mode & 0o777 == 0o600
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "sanctum/PERSONA.md" in names and f"sanctum/{path}" in names
    assert json.loads(exported.out)["files"] == sum(1 for n in names if "." in n.rsplit("/", 1)[-1])
    assert cli("sanctum", "export", str(archive), *at).code == 4  # never over a file
    # show: the sanctum and the journal, metadata only.
    shown = cli("show", *at)
    assert shown.code == 0, shown.err
    assert "sanctum: " in shown.out and "1 undistilled raw" in shown.out
    assert "journal: 1 entries (0 redacted, 0 promoted" in shown.out
    document = json.loads(cli("show", "--json", *at).out)
    assert document["sanctum"]["undistilled_raw"] == 1 and document["sanctum"]["born"]
    assert document["journal"]["entries"] == 1 and document["journal"]["state"] == "ok"
    assert secret not in shown.out + json.dumps(document)
