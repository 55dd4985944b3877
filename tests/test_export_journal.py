"""`singularity export` carries the private journal, both ways, through a real PostgreSQL.

A being lives in a state directory on the scripted gateway and writes journal entries. It
is exported to the session's PostgreSQL server, its journal into a new local state
directory (`--to-state-dir`), and back to a new state directory: `state.json`,
`activity.jsonl`, the sanctum and the journal's keyring are the same bytes, and the
journal holds the same entries under the same keys. The being lives in PostgreSQL with
that local directory and recalls what it wrote before the move; a journal on the
PostgreSQL journal backend comes out as the copy's own durable SQLite file. A being with a journal
and no local directory for it, a store holding the being, and `--to-state-dir` with a
directory target are refused, and nothing is written.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.domain.state import AgentState
from singularity.journal.embedders import HashingEmbedder
from singularity.journal.extension import fingerprint_of, journal_config
from singularity.journal.opening import open_journal
from singularity.journal.portable import PortableJournal, read_journal
from singularity.journal.service import Journal
from singularity.store.opening import StorePlace, holds_being_at
from singularity.store.transfer import copy_being
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import run_singularity as singularity
from tests.support.files import tree
from tests.support.journal import config_of, new_being
from tests.support.sanctum import being_args
from tests.support.stores import store_url
from tests.support.syncs import SyncLog

WRITE, RECALL = "singularity_journal_write", "singularity_journal_recall"
THOUGHTS = ("the orchard gate sticks in the rain", "the heron came back at dawn")
HASHING = ("--journal-embedder", "hashing")


@pytest.fixture
def journaled(tmp_path: Path) -> tuple[Path, str]:
    """A being at `<root>/being` that wrote two journal entries and a sanctum file."""
    root = tmp_path / "lived"
    root.mkdir()
    agent = f"agent-{uuid.uuid4().hex[:12]}"
    script = [
        Turn.tool_call(WRITE, {"text": THOUGHTS[0], "mood": "calm"}),
        Turn.tool_call(WRITE, {"text": THOUGHTS[1], "mood": "glad", "thread_id": "birds"}),
        Turn.tool_call(
            "singularity_sanctum_write", {"path": "memory/topics/birds.md", "content": "# Birds\n"}
        ),
        Turn.text("done"),
    ]
    with ScriptedServer(script) as server:
        lived = singularity("once", *being_args(root, server.url, "--agent-id", agent, *HASHING))
    assert lived.returncode == 0, lived.stderr
    return root, agent


def entries(journal: Journal) -> list[dict[str, Any]]:
    """Every entry as the store and the keyring give it: metadata, text, vector."""
    found = []
    for row in journal.store.rows():
        vector = journal.vector_of(row)
        found.append(
            {
                "id": row.id,
                "created_at": row.created_at,
                "mood": row.mood,
                "thread": row.thread_id,
                "ciphertext": row.ciphertext,
                "key_id": row.key_id,
                "model": row.embedding_model,
                "vector": None if vector is None else vector.tobytes(),
                "text": journal.keyring.open(row),
            }
        )
    return found


def journal_entries(state_dir: Path) -> list[dict[str, Any]]:
    journal = open_journal(config_of(state_dir), create=False)
    assert journal is not None
    try:
        return entries(journal)
    finally:
        journal.close()


def in_store(agent: str) -> bool:
    return holds_being_at(StorePlace.parse(store_url()), agent)


def test_the_journal_goes_to_postgresql_and_back(journaled: tuple[Path, str]) -> None:
    root, agent = journaled
    source, local, back, url = root / "being", root / "local", root / "back", store_url()
    original = journal_entries(source)
    assert [entry["text"] for entry in original] == list(THOUGHTS)

    unplaced = singularity("export", "--state-dir", str(source), "--to", url)
    assert unplaced.returncode == 4
    assert "private journal (2 entries" in unplaced.stderr and "--to-state-dir" in unplaced.stderr
    assert not in_store(agent)

    to_pg = singularity(
        "export", "--state-dir", str(source), "--to", url, "--to-state-dir", str(local)
    )
    assert to_pg.returncode == 0, to_pg.stderr
    report = json.loads(to_pg.stdout)
    assert report["journal_entries"] == 2 and report["local_state_dir"] == str(local)
    assert sorted(path.name for path in local.iterdir()) == ["journal.key", "journal.sqlite3"]
    assert (local / "journal.key").read_bytes() == (source / "journal.key").read_bytes()
    in_pg = ["--state-url", url, "--agent-id", agent, "--state-dir", str(local)]
    stats = singularity("journal", "stats", *in_pg)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["entries"] == 2

    to_dir = singularity("export", *in_pg, "--to", str(back))
    assert to_dir.returncode == 0, to_dir.stderr
    assert json.loads(to_dir.stdout)["journal_entries"] == 2
    for name in ("state.json", "activity.jsonl", "journal.key"):
        assert (back / name).read_bytes() == (source / name).read_bytes(), name
    assert tree(back / "sanctum") == tree(source / "sanctum")
    assert journal_entries(back) == original
    for command in (["verify", str(back)], ["journal", "verify", "--state-dir", str(back)]):
        checked = singularity(*command)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def to_postgres(root: Path, local: Path) -> subprocess.CompletedProcess[str]:
    return singularity(
        "export", "--state-dir", str(root / "being"), "--to", store_url(),
        "--to-state-dir", str(local),
    )  # fmt: skip


def test_the_copy_in_postgresql_recalls_what_it_wrote_before(
    journaled: tuple[Path, str], tmp_path: Path
) -> None:
    root, agent = journaled
    local = tmp_path / "local"
    done = to_postgres(root, local)
    assert done.returncode == 0, done.stderr
    script = [Turn.tool_call(RECALL, {"query": "heron dawn", "k": 2}), Turn.text("remembered")]
    with ScriptedServer(script) as server:
        lived = singularity(
            "once", "--resume", *being_args(tmp_path, server.url, *HASHING),
            "--state-dir", str(local), "--state-url", store_url(), "--agent-id", agent,
        )  # fmt: skip
        assert lived.returncode == 0, lived.stderr
        last = server.completions[-1].json
    assert last is not None
    recalled = [message["content"] for message in last["messages"] if message["role"] == "tool"]
    assert THOUGHTS[1] in recalled[-1]


def test_a_refused_copy_writes_nothing(journaled: tuple[Path, str], tmp_path: Path) -> None:
    root, agent = journaled
    assert to_postgres(root, tmp_path / "local").returncode == 0
    again = to_postgres(root, tmp_path / "local-again")
    assert again.returncode == 4 and "already exists" in again.stderr
    assert not (tmp_path / "local-again").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["lived", "local"]

    to_dir = singularity(
        "export", "--state-dir", str(root / "being"), "--to", str(tmp_path / "copy"),
        "--to-state-dir", str(tmp_path / "nowhere"),
    )  # fmt: skip
    assert to_dir.returncode == 2, to_dir.stderr
    assert "--to-state-dir names the local state directory" in to_dir.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["lived", "local"]
    assert in_store(agent)


def test_a_journal_in_postgresql_comes_out_as_the_copy_s_own_file(
    tmp_path: Path, sync_log: SyncLog
) -> None:
    """The source's journal lives on the PostgreSQL journal backend (`--journal-url`); the
    directory copy holds the same entries in its own SQLite file, and every file of the
    copy is durable when the export returns."""
    source, back = tmp_path / "being", tmp_path / "back"
    new_being(source)
    url = store_url()
    journal = open_journal(config_of(source, url=url), embedder=HashingEmbedder())
    assert journal is not None
    try:
        for thought in THOUGHTS:
            journal.write(thought, "calm", None)
        original = entries(journal)
    finally:
        journal.close()
    settings = resolve({"state_dir": str(source), "journal_url": url}, environ={})

    def read(state: AgentState) -> PortableJournal | None:
        return read_journal(journal_config(settings, fingerprint_of(state)))

    copied = copy_being(
        StorePlace.directory(str(source)), StorePlace.directory(str(back)), None, journal_of=read
    )
    assert copied.journal is not None and copied.journal.source.startswith("postgresql://")
    assert sync_log.problems(back) == []
    assert (back / "journal.key").read_bytes() == (source / "journal.key").read_bytes()
    assert journal_entries(back) == original
    assert not (source / "journal.sqlite3").exists()  # the source is left as it was
