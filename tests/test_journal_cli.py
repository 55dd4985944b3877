"""`singularity journal …` and `singularity reasonlog …`: metadata only, ids for failures."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from singularity.journal import reasonlog
from singularity.journal.embedders import HashingEmbedder
from singularity.journal.opening import open_journal
from singularity.journal.service import Journal
from singularity.storage import fsio
from singularity.storage.statedir import StateDir
from tests.support.journal import config_of, new_being
from tests.support.loop_http import Result
from tests.support.postgres import postgres_server

SECRET = "the orchard key is under the third stone"


def _journal(state_dir: Path, url: str | None = None, days_ago: float = 0) -> Journal:
    moment = datetime.now(UTC) - timedelta(days=days_ago)
    journal = open_journal(
        config_of(state_dir, url=url), lambda: moment, embedder=HashingEmbedder()
    )
    assert journal is not None
    return journal


def test_without_a_journal(tmp_path: Path, cli: Callable[..., Result]) -> None:
    (tmp_path / "being").mkdir(mode=0o700)
    result = cli("journal", "stats", "--state-dir", str(tmp_path / "being"))
    assert result.code == 4 and "no being at" in result.err
    new_being(tmp_path / "being")
    result = cli("journal", "stats", "--state-dir", str(tmp_path / "being"))
    assert result.code == 4 and "no journal exists" in result.err
    assert not (tmp_path / "being" / "journal.key").exists()


def test_stats_purge_rotate_verify_destroy(
    tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    state_dir = tmp_path / "being"
    old = _journal(state_dir, days_ago=40)
    old.write(SECRET, "calm", None)
    old.close()
    journal = _journal(state_dir)
    journal.write(SECRET, "calm", None)
    bad = journal.write(SECRET + " again", None, None).entry_id
    at = ["--state-dir", str(state_dir)]

    stats = cli("journal", "stats", *at)
    report = json.loads(stats.out)
    assert report["entries"] == 3 and report["expired"] == 1 and report["by_mood"]["calm"] == 2
    assert cli("journal", "purge", "--dry-run", *at).out.strip() == '{\n  "would_purge": 1\n}'
    with StateDir.open(str(state_dir), create=False):
        locked = cli("journal", "purge", *at)
    assert locked.code == 4 and "another runtime owns" in locked.err
    assert json.loads(cli("journal", "purge", *at).out) == {"purged": 1}

    rotated = json.loads(cli("journal", "rotate-key", *at).out)
    assert rotated["re_encrypted"] == 2 and rotated["unreadable"] == []

    row = journal.store.rows(ids=[bad])[0]
    journal.store.update(
        replace(row, ciphertext=bytes([row.ciphertext[0] ^ 1]) + row.ciphertext[1:])
    )
    journal.close()
    verified = cli("journal", "verify", *at)
    assert verified.code == 4
    assert f"journal entry {bad} failed authentication" in verified.out
    assert json.loads(verified.out[verified.out.index("{") :])["failed"] == [bad]

    embedded = json.loads(cli("journal", "embed", "--journal-embedder", "hashing", *at).out)
    assert embedded == {"embedder": "hashing-v1", "embedded": 0, "unreadable": []}

    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    refused = cli("journal", "destroy", *at)
    assert refused.code != 0 and (state_dir / "journal.key").exists()
    assert json.loads(cli("journal", "destroy", "--yes", *at).out) == {"destroyed": 2}
    assert not (state_dir / "journal.key").exists()
    for result in (stats, verified, refused):
        assert SECRET not in result.out + result.err


def test_the_postgres_backend_from_the_cli(tmp_path: Path, cli: Callable[..., Result]) -> None:
    url = postgres_server().url
    journal = _journal(tmp_path / "being", url)
    journal.write(SECRET, None, None)
    journal.close()
    at = ["--state-dir", str(tmp_path / "being"), "--journal-url", url]
    stats = json.loads(cli("journal", "stats", *at).out)
    assert stats["backend"] == "postgresql" and stats["entries"] == 1
    assert "@" not in stats["location"]
    assert json.loads(cli("journal", "verify", *at).out) == {
        "checked": 1,
        "failed": [],
        "damage": [],
        "lost": [],
        "unreachable": False,
    }
    assert json.loads(cli("journal", "destroy", "--yes", *at).out) == {"destroyed": 1}


def test_reasonlog_tail_and_show(tmp_path: Path, cli: Callable[..., Result]) -> None:
    state_dir = tmp_path / "being"
    state_dir.mkdir(mode=0o700)
    dir_fd = fsio.open_dir(state_dir)
    entries = [
        reasonlog.record(f"2026-01-0{i}T00:00:00Z", f"step {i}", source="being")
        for i in range(1, 5)
    ]
    for entry in entries:
        reasonlog.append(dir_fd, entry)
    with open(state_dir / "reasonlog.jsonl", "ab") as handle:
        handle.write(b'{"id": "torn')  # a crash mid-append
    at = ["--state-dir", str(state_dir)]
    tail = cli("reasonlog", "tail", "-n", "2", *at)
    assert [json.loads(line)["thought"] for line in tail.out.splitlines()] == ["step 3", "step 4"]
    shown = cli("reasonlog", "show", entries[0]["id"], *at)
    assert json.loads(shown.out) == entries[0]
    assert cli("reasonlog", "show", "missing", *at).code == 4
    assert (state_dir / "reasonlog.jsonl").stat().st_mode & 0o777 == 0o600
