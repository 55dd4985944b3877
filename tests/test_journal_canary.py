"""Journal plaintext never leaves process memory: a canary through a real being's life.

A being on the scripted gateway writes and recalls journal entries holding a canary
string. After the run, after a SIGKILL mid-write (before and after the insert), and after
a purge, the canary is nowhere in the state directory (any file, the database included),
in the being's logs or in any CLI output; after the purge the entries' ciphertext is not in
the database file either. The model does see the real text, but only within its cycle.

Run as `python -m tests.test_journal_canary FAILPOINT ARGS…`, this module is the killed
worker: it arms a failpoint and runs `singularity run`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from singularity.journal.opening import open_journal
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import clean_environment
from tests.support.journal import config_of
from tests.support.loop_http import Result, boot, make_cli, run

CANARY = "CANARY-7f3a9c-lighthouse"
REPO = Path(__file__).resolve().parent.parent
WRITE, RECALL, PROMOTE = (
    "singularity_journal_write",
    "singularity_journal_recall",
    "singularity_journal_promote",
)


def _cycle_one() -> list[Turn]:
    return [
        Turn.tool_call(
            WRITE, {"text": f"I doubt myself today; {CANARY} is my secret", "mood": "uneasy"}
        ),
        Turn.tool_call(WRITE, {"text": f"second part of {CANARY}", "thread_id": "doubt"}),
        Turn.tool_call(RECALL, {"query": CANARY, "k": 3}),
        Turn.tool_call(WRITE, {"text": f"{CANARY} " + "x" * 4096}),  # too long: refused
        Turn.tool_call(WRITE, {"text": f"{CANARY} mail me at a.b@example.com"}),  # blanked
        Turn.tool_call(PROMOTE, {"entry_id": "not-an-id", "summary": CANARY}),
        Turn.tool_call(WRITE, {"text": '{"looks": "like json", "canary": "' + CANARY + '"}'}),
        Turn.text("done for now"),
    ]


def _cycle_two() -> list[Turn]:
    return [Turn.tool_call(RECALL, {"query": "doubt", "k": 5}), Turn.text("resting")]


def _env() -> dict[str, str]:
    env = clean_environment()
    env["PYTHONPATH"] = str(REPO)
    return env


def _args(root: Path, server: ScriptedServer, *extra: str) -> list[str]:
    (root / "ws").mkdir(exist_ok=True)
    return [
        "run",
        "--state-dir",
        str(root / "being"),
        "--workspace",
        str(root / "ws"),
        "--brama-url",
        server.url,
        "--brama-model",
        "scripted-model",
        "--cycle-interval-secs",
        "0",
        *extra,
    ]


def _run(
    root: Path, server: ScriptedServer, failpoint: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.test_journal_canary",
            failpoint,
            *_args(root, server, *extra),
        ],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return [
        str(path.relative_to(root))
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes()
    ]


def _assert_clean(state_dir: Path, *outputs: str) -> None:
    assert _files_holding(state_dir, CANARY.encode()) == []
    for output in outputs:
        assert CANARY not in output


def test_the_canary_never_leaves_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state_dir = tmp_path / "being"
    script = _cycle_one() + _cycle_two()
    with ScriptedServer(script) as server:
        first = _run(tmp_path, server, "", "--max-cycles", "2", "--log-format", "json")
        requests = [request.json for request in server.completions]
    assert first.returncode == 0, first.stderr
    _assert_clean(state_dir, first.stdout, first.stderr)

    # The model saw the real text within cycle 1, and only the placeholder in cycle 2.
    cycle_one_text = json.dumps(requests[3])
    assert CANARY in cycle_one_text
    assert len(requests) == len(script)
    cycle_two_text = json.dumps(requests[len(_cycle_one())])
    assert CANARY not in cycle_two_text and "(private journal content omitted)" in cycle_two_text
    events = [json.loads(line) for line in (state_dir / "activity.jsonl").read_text().splitlines()]
    added = [e for e in events if e["type"] == "journal_entry_added"]
    assert [(e["mood"], e["redacted"]) for e in added] == [
        ("uneasy", False),
        (None, False),
        (None, True),
        (None, False),
    ]
    assert set(added[0]) == {"type", "at", "cycle", "id", "mood", "redacted"}
    recalled = [e for e in events if e["type"] == "journal_recalled"]
    assert [e["k"] for e in recalled] == [3, 5] and len(recalled[0]["ids"]) == 2
    assert verify_state_dir(str(state_dir)) == []

    # SIGKILL in the middle of a write: before the row is inserted, and after it.
    for point in ("journal.insert", "journal.inserted"):
        turns = [
            Turn.tool_call(WRITE, {"text": f"{CANARY} at {point}"}),
            Turn.text("never reached"),
        ]
        with ScriptedServer(turns) as server:
            killed = _run(tmp_path, server, f"{point}=kill", "--resume", "--max-cycles", "1")
        assert killed.returncode == -9, killed.stderr
        _assert_clean(state_dir, killed.stdout, killed.stderr)
    with ScriptedServer([Turn.text("back")]) as server:
        resumed = _run(tmp_path, server, "", "--resume", "--max-cycles", "1")
    assert resumed.returncode == 0, resumed.stderr
    _assert_clean(state_dir, resumed.stdout, resumed.stderr)
    assert verify_state_dir(str(state_dir)) == []

    # Every CLI command that looks at the journal or the state: metadata only.
    cli = make_cli(tmp_path, monkeypatch, capsys)
    at = ["--state-dir", str(state_dir)]
    outputs: list[Result] = [
        cli("journal", "stats", *at),
        cli("journal", "verify", *at),
        cli("journal", "purge", "--dry-run", *at),
        cli("journal", "embed", *at),
        cli("journal", "rotate-key", *at),
        cli("reasonlog", "tail", *at),
        cli("show", *at),
        cli("show", "--json", *at),
        cli("verify", str(state_dir)),
    ]
    assert [result.code for result in outputs] == [0] * len(outputs), outputs
    stats = json.loads(outputs[0].out)
    assert stats["entries"] == 5 and stats["redacted"] == 1
    _assert_clean(state_dir, *(result.out + result.err for result in outputs))

    # Purge (31 days on), then the database holds neither the text nor the ciphertext.
    config = config_of(state_dir)
    later = datetime.now(UTC) + timedelta(days=31)
    journal = open_journal(config, lambda: later, create=False)
    assert journal is not None
    ciphertexts = [row.ciphertext for row in journal.store.rows()]
    assert len(ciphertexts) == 5
    assert journal.purge() == 5
    journal.close()
    database = [p for p in state_dir.iterdir() if p.name.startswith("journal.sqlite3")]
    assert database
    for cipher in ciphertexts:
        assert all(cipher[:24] not in path.read_bytes() for path in database)
    after = cli("journal", "stats", *at)
    assert json.loads(after.out)["entries"] == 0
    _assert_clean(state_dir, after.out, after.err)


def test_archived_conversation_holds_only_the_placeholder(tmp_path: Path) -> None:
    script = [
        Turn.tool_call(WRITE, {"text": f"{CANARY} one"}),
        Turn.tool_call(RECALL, {"query": CANARY}),
        Turn.text("first"),
        Turn.tool_call(WRITE, {"text": f"{CANARY} two"}),
        Turn.text("second"),
    ]

    async def live() -> None:
        runtime = boot(tmp_path, server, journal_embedder="hashing")
        runtime.being.window_messages = 3  # most messages leave for conversation.jsonl
        try:
            await runtime.once()
            await runtime.once()
        finally:
            await runtime.shutdown()

    with ScriptedServer(script) as server:
        run(live())
    state_dir = tmp_path / "being"
    archived = (state_dir / "conversation.jsonl").read_text()
    assert "(private journal content omitted)" in archived
    _assert_clean(state_dir)
    assert verify_state_dir(str(state_dir)) == []


if __name__ == "__main__":
    from singularity.cli import main as cli_main
    from singularity.storage import fsio

    if sys.argv[1]:
        fsio.arm_failpoints(sys.argv[1])
    sys.argv = ["singularity", *sys.argv[2:]]
    cli_main.main()
