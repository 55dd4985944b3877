"""`singularity export` and `singularity sanctum export --to` on a being that really lived.

A being lives two cycles on the scripted gateway (memories, sanctum writes, a session
note), is exported to a real PostgreSQL store and back to a new state directory: the
files are the same, byte for byte, and `verify` passes on the copy. Bad places, a place
holding a being and a living source are refused with clear errors, and nothing is written.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from singularity.store.directory import DirectoryStore
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import run_singularity as singularity
from tests.support.files import tree
from tests.support.sanctum import being_args
from tests.support.stores import store_url

FILES = ("state.json", "activity.jsonl")


def live(root: Path, agent: str, turns: list[Turn], *extra: str) -> None:
    with ScriptedServer(turns) as server:
        done = singularity("once", *being_args(root, server.url, "--agent-id", agent, *extra))
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def lived(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A being that lived two cycles at `<root>/being`, and its agent id."""
    root = tmp_path_factory.mktemp("lived")
    agent = f"agent-{uuid.uuid4().hex[:12]}"
    first = [
        Turn.tool_call("singularity_memory_remember", {"text": "the price is 42", "kind": "fact"}),
        Turn.tool_call(
            "singularity_sanctum_write",
            {"path": "memory/topics/pricing.md", "content": "# Pricing\n\n42 USD, ✓.\n"},
        ),
        Turn.text("first life done"),
    ]
    live(root, agent, first)
    second = [
        Turn.tool_call("singularity_sanctum_read", {"path": "memory/topics/pricing.md"}),
        Turn.text("second life done"),
    ]
    live(root, agent, second, "--resume")
    return root, agent


def test_a_being_goes_to_postgresql_and_back_unchanged(lived: tuple[Path, str]) -> None:
    root, agent = lived
    source, back, url = root / "being", root / "back", store_url()
    to_pg = singularity("export", "--state-dir", str(source), "--to", url)
    assert to_pg.returncode == 0, to_pg.stderr
    report: dict[str, Any] = json.loads(to_pg.stdout)
    assert report["exported"] == f"state directory {source}"
    assert report["to"].startswith(f"being {agent} in postgresql://")
    assert report["cycle"] == 2 and report["sanctum_files"] > 5

    to_dir = singularity("export", "--state-url", url, "--agent-id", agent, "--to", str(back))
    assert to_dir.returncode == 0, to_dir.stderr
    for name in FILES:
        assert (back / name).read_bytes() == (source / name).read_bytes(), name
    assert tree(back / "sanctum") == tree(source / "sanctum")
    for place in (source, back):
        verified = singularity("verify", str(place))
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert verified.stdout.strip() == f"{place}: ok"
    in_postgres = singularity("verify", "--state-url", url, "--agent-id", agent)
    assert in_postgres.returncode == 0, in_postgres.stdout + in_postgres.stderr
    assert in_postgres.stdout.strip().endswith(": ok")

    files = root / "sanctum-files"
    written = singularity(
        "sanctum", "export", "--state-url", url, "--agent-id", agent, "--to", str(files)
    )
    assert written.returncode == 0, written.stderr
    assert tree(files) == tree(source / "sanctum")
    assert json.loads(written.stdout)["files"] == report["sanctum_files"]

    again = singularity("export", "--state-dir", str(source), "--to", url)
    assert again.returncode == 4
    assert f"being {agent} in postgresql://" in again.stderr and "already exists" in again.stderr
    over = singularity("export", "--state-url", url, "--agent-id", agent, "--to", str(source))
    assert over.returncode == 4 and f"{source} already exists" in over.stderr
    assert (back / "state.json").read_bytes() == (source / "state.json").read_bytes()


def test_a_directory_sanctum_exports_as_files(lived: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = lived
    done = singularity(
        "sanctum", "export", "--state-dir", str(root / "being"), "--to", str(tmp_path / "out")
    )
    assert done.returncode == 0, done.stderr
    assert tree(tmp_path / "out") == tree(root / "being" / "sanctum")
    both = singularity("sanctum", "export", str(tmp_path / "a.tar"), "--to", str(tmp_path / "b"))
    assert both.returncode == 2 and "give either ARCHIVE or --to DIR" in both.stderr


@pytest.mark.parametrize(
    ("to", "message"),
    [
        ("ftp://example.org/x", "--to ftp://example.org/x: unknown scheme 'ftp'"),
        ("postgresql://user:secret@[::1", "--to"),
    ],
)
def test_a_bad_target_is_refused(lived: tuple[Path, str], to: str, message: str) -> None:
    root, _ = lived
    done = singularity("export", "--state-dir", str(root / "being"), "--to", to)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "secret" not in done.stderr


def test_a_missing_being_and_a_wrong_agent_id_are_refused(
    lived: tuple[Path, str], tmp_path: Path
) -> None:
    root, agent = lived
    missing = singularity(
        "export",
        "--state-url",
        store_url(),
        "--agent-id",
        "nobody-here",
        "--to",
        str(tmp_path / "x"),
    )
    assert missing.returncode == 4 and "no being nobody-here in postgresql://" in missing.stderr
    wrong = singularity(
        "export",
        "--state-dir",
        str(root / "being"),
        "--agent-id",
        "other",
        "--to",
        str(tmp_path / "y"),
    )
    assert wrong.returncode == 4 and f"has the agent id {agent}, not other" in wrong.stderr
    assert sorted(os.listdir(tmp_path)) == []


def test_a_living_being_is_not_exported(lived: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = lived
    holder = DirectoryStore.open(str(root / "being"), create=False)
    try:
        done = singularity(
            "export", "--state-dir", str(root / "being"), "--to", str(tmp_path / "z")
        )
    finally:
        holder.close()
    assert done.returncode == 4 and "another runtime owns" in done.stderr
    assert sorted(os.listdir(tmp_path)) == []
