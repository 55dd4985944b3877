"""The sanctum tools: naming rules, write-once intake, confinement; a refusal changes nothing."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from singularity.sanctum import tools, writing
from singularity.sanctum.names import (
    BOUNDARY,
    HISTORY,
    IO,
    NAME,
    NOT_FOUND,
    SOURCE,
    TOO_LARGE,
    WRITE_ONCE,
)
from singularity.sanctum.tools import Done
from singularity.tools.base import Status
from tests.support.sanctum import (
    TODAY,
    context,
    fake_core,
    fixture_sanctum,
    snapshot,
    wake_lines,
)

Tool = Callable[[tools.Context, dict[str, Any]], Done]
INVALID = "invalid_arguments"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A born sanctum with sessions, raw files and pending items, and three ways out."""
    sanctum = fixture_sanctum(tmp_path, "sessions", "raw", "pending")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("OUTSIDE-SECRET\n")
    os.symlink(outside, sanctum / "memory" / "out")
    os.symlink(outside / "secret.md", sanctum / "memory" / "topics" / "leak.md")
    os.symlink("../../../outside/secret.md", sanctum / "memory" / "topics" / "rel-leak.md")
    return sanctum


def run(root: Path, tool: Tool, **arguments: Any) -> Done:
    return tool(context(root), arguments)


def ok(root: Path, tool: Tool, **arguments: Any) -> dict[str, Any]:
    done = run(root, tool, **arguments)
    assert done.outcome.status is Status.SUCCESS, done.outcome
    content: dict[str, Any] = done.outcome.content
    return content


def refused(root: Path, tool: Tool, code: str, **arguments: Any) -> str:
    before = snapshot(root)
    done = run(root, tool, **arguments)
    assert (done.outcome.status, done.outcome.error_code) == (Status.FAILED, code), done.outcome
    assert snapshot(root) == before
    assert done.written == [] and done.merged is None and done.tended is None
    message: str = done.outcome.content["message"]
    return message


ESCAPES = [
    ("../outside/secret.md", BOUNDARY),
    ("/etc/passwd", BOUNDARY),
    ("memory/../../outside/secret.md", BOUNDARY),
    ("./PERSONA.md", BOUNDARY),
    ("memory/out/secret.md", BOUNDARY),
    ("memory/topics/leak.md", BOUNDARY),
    ("memory/topics/rel-leak.md", BOUNDARY),
]


# write


@pytest.mark.parametrize(
    ("path", "kind_check"),
    [
        ("memory/topics/pricing.md", "new"),
        ("memory/decisions/2026-10-04-raise.md", "new"),
        ("memory/sessions/2026-10-07-work.md", "new"),
        ("memory/open-questions.md", "new"),
        ("capabilities/pricing.md", "new"),
        ("PERSONA.md", "replaced"),
        ("memory/people/ruben.md", "replaced"),
    ],
)
def test_write_creates_or_replaces_named_files(root: Path, path: str, kind_check: str) -> None:
    assert (root / path).exists() == (kind_check == "replaced")
    done = run(root, writing.write_tool, path=path, content="# New\n\nfresh text\n")
    assert done.outcome.content == {"path": path, "bytes": 18}
    assert done.written == [(path, 18)]
    assert (root / path).read_text() == "# New\n\nfresh text\n"
    assert (root / path).stat().st_mode & 0o777 == 0o600


def test_write_creates_missing_folders_owner_only(root: Path) -> None:
    ok(root, writing.write_tool, path="memory/decisions/2026-10-04-raise.md", content="x\n")
    assert (root / "memory/decisions").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("memory/Topics/x.md", NAME),
        ("memory/topics/X.md", NAME),
        ("memory/topics/x.txt", NAME),
        ("memory/topics/-x.md", NAME),
        ("memory/topics/" + "a" * 65 + ".md", NAME),
        ("memory/topics/2026-02-30-leap.md", NAME),
        ("memory/topics/2026-10-04.md", NAME),
        ("memory/topics/2026-10-04_x.md", NAME),
        ("memory/sessions/notes.md", NAME),
        ("memory/a/b/c.md", NAME),
        ("memory/pending.md", NAME),
        ("memory/.tended", NAME),
        ("notes.md", NAME),
        ("references/x.md", NAME),
        ("capabilities/x/y.md", NAME),
        ("capabilities/X.md", NAME),
        ("raw/2026-10-07-a-b.md", WRITE_ONCE),
        ("raw/2026-10-02-oss-call.md", WRITE_ONCE),
        ("PULSE.md", NOT_FOUND),
        *ESCAPES,
    ],
)
def test_write_refusals(root: Path, path: str, code: str) -> None:
    refused(root, writing.write_tool, code, path=path, content="text\n")


def test_identity_files_are_replaced_never_created(root: Path) -> None:
    (root / "BOND.md").unlink()
    message = refused(root, writing.write_tool, NOT_FOUND, path="BOND.md", content="# Bond\n")
    assert message == "BOND.md is replaced, never created (the runtime seeds it)"


@pytest.mark.parametrize(
    "arguments",
    [
        {"content": "x"},
        {"path": "", "content": "x"},
        {"path": "memory/topics/a\x07.md", "content": "x"},
        {"path": 7, "content": "x"},
        {"path": "memory/topics/a.md"},
        {"path": "memory/topics/a.md", "content": "   \n"},
        {"path": "memory/topics/a.md", "content": "a\x00b"},
        {"path": "memory/topics/a.md", "content": "x" * (64 * 1024 + 1)},
    ],
)
def test_write_argument_rules(root: Path, arguments: dict[str, Any]) -> None:
    refused(root, writing.write_tool, INVALID, **arguments)


def test_a_standing_file_keeps_its_history(root: Path) -> None:
    ok(root, writing.history_tool, path="memory/people/ruben.md", line="moved to Berlin")
    ok(
        root,
        writing.write_tool,
        path="memory/people/ruben.md",
        content="# Ruben\n\nLives in Berlin.\n",
    )
    assert (root / "memory/people/ruben.md").read_text() == (
        "# Ruben\n\nLives in Berlin.\n\n## History\n\n- 2026-10-07: moved to Berlin\n"
    )
    same = (root / "memory/people/ruben.md").read_text().replace("Lives", "Now lives")
    ok(root, writing.write_tool, path="memory/people/ruben.md", content=same)
    message = refused(
        root,
        writing.write_tool,
        HISTORY,
        path="memory/people/ruben.md",
        content="# Ruben\n\n## History\n\n- 2020-01-01: invented\n",
    )
    assert "singularity_sanctum_history" in message
    refused(
        root,
        writing.write_tool,
        HISTORY,
        path="memory/topics/new.md",
        content="# New\n\n## History\n\n- 2020-01-01: backdated\n",
    )


# history


def test_history_adds_dated_lines_under_one_section(root: Path) -> None:
    (root / "memory/people/ruben.md").write_text(
        "# Ruben\n\n## History\n\n- 2026-01-01: met\n\n## Notes\n\nlikes tea\n"
    )
    content = ok(
        root, writing.history_tool, path="memory/people/ruben.md", line="  became a partner "
    )
    assert content == {"path": "memory/people/ruben.md", "line": "- 2026-10-07: became a partner"}
    assert (root / "memory/people/ruben.md").read_text() == (
        "# Ruben\n\n## Notes\n\nlikes tea\n\n## History\n\n- 2026-01-01: met\n"
        "- 2026-10-07: became a partner\n"
    )


@pytest.mark.parametrize(
    ("path", "line", "code"),
    [
        ("memory/sessions/2026-10-03-pricing.md", "x", NAME),
        ("PERSONA.md", "x", NAME),
        ("capabilities/x.md", "x", NAME),
        ("raw/2026-10-02-oss-call.md", "x", WRITE_ONCE),
        ("memory/people/nobody.md", "x", NOT_FOUND),
        ("memory/people/ruben.md", "two\nlines", INVALID),
        ("memory/people/ruben.md", "x" * 513, INVALID),
        ("memory/people/ruben.md", "   ", INVALID),
        *[(path, "x", code) for path, code in ESCAPES],
    ],
)
def test_history_refusals(root: Path, path: str, line: str, code: str) -> None:
    refused(root, writing.history_tool, code, path=path, line=line)


def test_history_refuses_to_grow_a_file_past_64_kib(root: Path) -> None:
    (root / "memory/people/ruben.md").write_text("x" * (64 * 1024 - 10))
    refused(root, writing.history_tool, TOO_LARGE, path="memory/people/ruben.md", line="one more")


# intake


def test_intake_is_written_once(root: Path) -> None:
    content = ok(
        root, writing.intake_tool, area="calls", descriptor="vendor", content="We agreed.\n"
    )
    assert content == {"path": f"raw/{TODAY}-calls-vendor.md", "bytes": 48}
    raw = root / "raw" / f"{TODAY}-calls-vendor.md"
    assert raw.read_text() == "---\nstatus: raw\ndistilled_to: []\n---\nWe agreed.\n"
    assert raw.stat().st_mode & 0o777 == 0o600
    message = refused(
        root, writing.intake_tool, WRITE_ONCE, area="calls", descriptor="vendor", content="other"
    )
    assert "written once" in message
    ok(root, writing.intake_tool, area="calls", descriptor="vendor", content="a,b\n", ext="csv")
    assert f"raw/{TODAY}-calls-vendor.md" in wake_lines(root)


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"area": "Calls", "descriptor": "x", "content": "c"}, NAME),
        ({"area": "calls", "descriptor": "a b", "content": "c"}, NAME),
        ({"area": "calls", "descriptor": "../x", "content": "c"}, NAME),
        ({"area": "calls", "descriptor": "x", "content": "c", "ext": "TXT"}, NAME),
        ({"area": "calls", "descriptor": "x", "content": "c", "ext": "t/x"}, NAME),
        ({"descriptor": "x", "content": "c"}, INVALID),
        ({"area": "calls", "descriptor": "x", "content": ""}, INVALID),
        ({"area": "calls", "descriptor": "x" * 65, "content": "c"}, INVALID),
    ],
)
def test_intake_refusals(root: Path, arguments: dict[str, Any], code: str) -> None:
    refused(root, writing.intake_tool, code, **arguments)


# distilled


def test_distilled_marks_the_raw_file_and_nothing_else(root: Path) -> None:
    source = "source: raw/2026-10-02-oss-call.md"
    ok(root, writing.write_tool, path="memory/topics/call.md", content=f"{source}\n\nThe gist.\n")
    ok(root, writing.write_tool, path="memory/people/ann.md", content=f"---\n{source}\n---\nAnn.\n")
    content = ok(
        root,
        writing.distilled_tool,
        raw="raw/2026-10-02-oss-call.md",
        files=["memory/topics/call.md", "memory/people/ann.md", "memory/topics/call.md"],
    )
    assert content["distilled_to"] == ["memory/topics/call.md", "memory/people/ann.md"]
    assert (root / "raw/2026-10-02-oss-call.md").read_text() == (
        "---\nstatus: distilled\ndistilled_to: [memory/topics/call.md, memory/people/ann.md]\n"
        "---\nBODY-5 a long call\n"
    )
    lines = wake_lines(root)
    assert "Undistilled raw (1):" in lines and "raw/2026-10-02-oss-call.md" not in lines


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"raw": "memory/people/ruben.md", "files": ["memory/topics/oss.md"]}, NAME),
        ({"raw": "raw/2026-01-01-none.md", "files": ["memory/topics/oss.md"]}, NOT_FOUND),
        ({"raw": "raw/2026-10-02-oss-call.md", "files": "memory/topics/oss.md"}, INVALID),
        ({"raw": "raw/2026-10-02-oss-call.md", "files": []}, INVALID),
        ({"raw": "raw/2026-10-02-oss-call.md", "files": [3]}, INVALID),
        ({"raw": "raw/2026-10-02-oss-call.md", "files": ["PERSONA.md"]}, NAME),
        ({"raw": "raw/2026-10-02-oss-call.md", "files": ["memory/topics/none.md"]}, NOT_FOUND),
        ({"raw": "raw/2026-10-02-oss-call.md", "files": ["memory/topics/oss.md"]}, SOURCE),
        ({"raw": "raw/../../outside/secret.md", "files": ["memory/topics/oss.md"]}, BOUNDARY),
        ({"raw": "raw/2026-10-02-oss-call.md", "files": ["memory/topics/leak.md"]}, BOUNDARY),
    ],
)
def test_distilled_refusals(root: Path, arguments: dict[str, Any], code: str) -> None:
    refused(root, writing.distilled_tool, code, **arguments)


# merge


def test_merge_keeps_one_file_and_both_histories(root: Path) -> None:
    ok(root, writing.write_tool, path="memory/topics/prices.md", content="# Prices\n\nold\n")
    ok(root, writing.history_tool, path="memory/topics/prices.md", line="first")
    (root / "memory/topics/pricing.md").write_text(
        "# Pricing\n\n## History\n\n- 2026-09-01: earlier\n"
    )
    done = run(
        root,
        writing.merge_tool,
        keep="memory/topics/pricing.md",
        drop="memory/topics/prices.md",
        content="# Pricing\n\nOne subject now.\n",
    )
    assert done.outcome.status is Status.SUCCESS
    assert done.merged == ("memory/topics/pricing.md", "memory/topics/prices.md")
    assert not (root / "memory/topics/prices.md").exists()
    assert (root / "memory/topics/pricing.md").read_text() == (
        "# Pricing\n\nOne subject now.\n\n## History\n\n- 2026-09-01: earlier\n- 2026-10-07: first\n"
    )


@pytest.mark.parametrize(
    ("keep", "drop", "code"),
    [
        ("memory/topics/oss.md", "memory/topics/oss.md", NAME),
        ("memory/topics/oss.md", "memory/sessions/2026-10-03-pricing.md", NAME),
        ("PERSONA.md", "memory/topics/oss.md", NAME),
        ("memory/topics/oss.md", "raw/2026-10-02-oss-call.md", WRITE_ONCE),
        ("memory/topics/oss.md", "memory/topics/none.md", NOT_FOUND),
        ("memory/topics/oss.md", "memory/topics/leak.md", BOUNDARY),
        ("memory/topics/oss.md", "../outside/secret.md", BOUNDARY),
    ],
)
def test_merge_refusals(root: Path, keep: str, drop: str, code: str) -> None:
    refused(root, writing.merge_tool, code, keep=keep, drop=drop, content="merged\n")


def test_merge_leaves_history_to_the_runtime(root: Path) -> None:
    refused(
        root,
        writing.merge_tool,
        HISTORY,
        keep="memory/topics/oss.md",
        drop="memory/topics/launch.md",
        content="merged\n\n## History\n\n- 2020-01-01: x\n",
    )


# pending and tended


def test_pending_add_and_clear(root: Path) -> None:
    assert ok(root, writing.pending_tool, action="add", line="Ask about taxes")["items"] == 3
    assert (root / "memory/pending.md").read_text().endswith("question.\n- Ask about taxes\n")
    ok(root, writing.pending_tool, action="clear")
    assert (root / "memory/pending.md").read_text() == ""
    assert "===== pending.md =====" not in wake_lines(root)
    refused(root, writing.pending_tool, INVALID, action="drop")
    refused(root, writing.pending_tool, INVALID, action="add")
    refused(root, writing.pending_tool, INVALID, action="add", line="a\tb\x07")


def test_tended_stamps_today_and_reports_the_map(root: Path) -> None:
    done = run(root, writing.tended_tool)
    assert done.tended is not None and done.tended[0] == TODAY
    assert (root / "memory/.tended").read_text() == f"{TODAY}\n"
    assert done.outcome.content["session_notes"] == 3
    assert done.outcome.content["session_notes_since"] == 0
    assert done.outcome.content["undistilled_raw"] == 2
    assert f"Tended: {TODAY}; session notes since: 0" in wake_lines(root)


# read, list, grep, wake


def test_read_pages_a_large_file(root: Path) -> None:
    text = "é" * 20000 + "end"
    (root / "memory/topics/big.md").write_text(text)
    first = ok(root, tools.read_tool, path="memory/topics/big.md")
    assert first["bytes"] == 40003 and first["offset"] == 0
    assert first["next_offset"] == 24 * 1024
    second = ok(root, tools.read_tool, path="memory/topics/big.md", offset=first["next_offset"])
    assert second["next_offset"] is None
    assert first["content"] + second["content"] == text


def test_read_follows_a_link_that_stays_inside(root: Path) -> None:
    os.symlink("people/ruben.md", root / "memory" / "alias.md")
    assert "BODY-4" in ok(root, tools.read_tool, path="memory/alias.md")["content"]


@pytest.mark.parametrize(
    ("path", "code"),
    [*ESCAPES, ("memory/none.md", NOT_FOUND), ("memory", IO), ("memory/topics/bin.md", IO)],
)
def test_read_refusals(root: Path, path: str, code: str) -> None:
    (root / "memory/topics/bin.md").write_bytes(b"\xff\xfe")
    refused(root, tools.read_tool, code, path=path)


def test_read_refuses_a_hard_link(root: Path) -> None:
    os.link(root / "memory/people/ruben.md", root / "memory/people/twin.md")
    refused(root, tools.read_tool, IO, path="memory/people/twin.md")


@pytest.mark.parametrize("offset", [-1, "3", True, 1.5, 10**6, 1])
def test_read_offset_rules(root: Path, offset: object) -> None:
    (root / "memory/topics/accent.md").write_text("é")
    refused(root, tools.read_tool, INVALID, path="memory/topics/accent.md", offset=offset)


def test_list_shows_folders_and_newest_files_first(root: Path) -> None:
    (root / "memory/.tended").write_text("2026-10-01\n")
    content = ok(root, tools.list_tool, folder="memory/sessions")
    assert [entry["name"] for entry in content["entries"]] == [
        "2026-10-05-launch.md",
        "2026-10-03-pricing.md",
        "2026-10-01-first-breath.md",
    ]
    memory = ok(root, tools.list_tool, folder="memory")["entries"]
    assert memory == [
        {"name": "people/", "type": "dir", "files": 1},
        {"name": "sessions/", "type": "dir", "files": 3},
        {"name": "topics/", "type": "dir", "files": 2},
        {"name": "pending.md", "type": "file", "bytes": 57},
        {"name": "out", "type": "other"},
    ]
    top = ok(root, tools.list_tool)
    assert {"name": "PERSONA.md", "type": "file", "bytes": 22} in top["entries"]


def test_list_caps_its_entries(root: Path) -> None:
    for number in range(205):
        (root / "memory/people" / f"p{number}.md").write_text("x")
    content = ok(root, tools.list_tool, folder="memory/people")
    assert (len(content["entries"]), content["total"], content["truncated"]) == (200, 206, True)


@pytest.mark.parametrize(
    ("folder", "code"),
    [("memory/out", BOUNDARY), ("..", BOUNDARY), ("/tmp", BOUNDARY), ("memory/none", NOT_FOUND)],
)
def test_list_refusals(root: Path, folder: str, code: str) -> None:
    refused(root, tools.list_tool, code, folder=folder)


def test_grep_finds_case_insensitively_newest_first_and_never_outside(root: Path) -> None:
    hits = ok(root, tools.grep_tool, query="BODY")["hits"]
    assert hits[:3] == [
        "memory/sessions/2026-10-05-launch.md:1: BODY-3 launch planned",
        "memory/sessions/2026-10-03-pricing.md:1: BODY-2 talked prices",
        "memory/sessions/2026-10-01-first-breath.md:1: BODY-1 born today",
    ]
    assert ok(root, tools.grep_tool, query="outside-secret")["hits"] == []
    assert ok(root, tools.grep_tool, query="vendor")["hits"] == []
    raw = ok(root, tools.grep_tool, query="VENDOR", folder="raw")["hits"]
    assert raw == ["raw/calls/2026-10-06-vendor-call.txt:5: BODY-7 vendor"]


def test_grep_caps_its_hits(root: Path) -> None:
    (root / "memory/topics/many.md").write_text("needle\n" * 60)
    content = ok(root, tools.grep_tool, query="Needle")
    assert (len(content["hits"]), content["truncated"]) == (50, True)


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"query": "x" * 1025}, INVALID),
        ({"query": ""}, INVALID),
        ({"query": "x", "folder": "memory/out"}, BOUNDARY),
        ({"query": "x", "folder": "../outside"}, BOUNDARY),
        ({"query": "x", "folder": "memory/none"}, NOT_FOUND),
    ],
)
def test_grep_refusals(root: Path, arguments: dict[str, Any], code: str) -> None:
    refused(root, tools.grep_tool, code, **arguments)


def test_wake_tool_returns_the_wake_text(root: Path) -> None:
    content = ok(root, tools.wake_tool)
    assert content["mode"] == "WAKING"
    assert content["wake"].split("\n") == wake_lines(root)
    for name in ("PERSONA.md", "CREED.md", "BOND.md", "HOW-I-REMEMBER.md", "CAPABILITIES.md"):
        (root / name).write_text("y" * 15000)
    elided = ok(root, tools.wake_tool)["wake"]
    assert "y" * 100 not in elided
    assert "(in the Sanctum section of your system message)" in elided


def test_the_toolset_journals_every_change(tmp_path: Path) -> None:
    core, host = fake_core(tmp_path)
    asyncio.run(core.at_boot())
    host.state.cycle = 4
    toolset = core.toolsets()[0]
    names = [definition.name for definition in toolset.definitions()]
    assert names == [
        f"singularity_sanctum_{name}"
        for name in (
            [
                "wake",
                "list",
                "grep",
                "read",
                "write",
                "history",
                "intake",
                "distilled",
                "merge",
                "pending",
                "tended",
            ]
        )
    ]

    def call(name: str, **arguments: Any) -> Any:
        return asyncio.run(toolset.call(f"singularity_sanctum_{name}", arguments))

    call("write", path="memory/topics/a.md", content="# A\n")
    call("write", path="memory/topics/b.md", content="# B\n")
    call("merge", keep="memory/topics/a.md", drop="memory/topics/b.md", content="# AB\n")
    call("tended")
    refusal = call("write", path="raw/x.md", content="x")
    assert refusal.error_code == WRITE_ONCE
    kinds = [(event["type"], event.get("path"), event.get("cycle")) for event in host.events]
    assert kinds == [
        ("sanctum_initialized", None, None),
        ("sanctum_written", "memory/topics/a.md", 4),
        ("sanctum_written", "memory/topics/b.md", 4),
        ("sanctum_written", "memory/topics/a.md", 4),
        ("sanctum_merged", None, 4),
        ("sanctum_tended", None, 4),
    ]
    assert host.events[4]["keep"] == "memory/topics/a.md"
    assert host.events[4]["drop"] == "memory/topics/b.md"
    assert host.events[5]["date"] == "2026-10-07"
