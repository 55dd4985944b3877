"""`singularity checkpoint`: a stopped being's `state.json` made complete by itself.

A being killed between checkpoints leaves its newest steps in `state.redo`; a program
that reads only being-v1 files would see an older being. After `singularity checkpoint`
`state.json` alone is the current state and the log is empty; a being a runtime holds is
refused and left untouched.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from singularity.domain.state import parse_state
from singularity.store import redo
from singularity.store.directory import DirectoryStore, peek_state
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import Result, cli_args
from tests.support.stores import a_being, live_a_step, store_url


def killed_between_checkpoints(path: Path, steps: int) -> bytes:
    """A being whose last `steps` steps are only in `state.redo` (its runtime never
    stopped cleanly); the bytes of its stale `state.json`."""
    store = DirectoryStore.open(str(path))
    assert store.load() is None
    state = a_being()
    store.commit(state, [])
    for index in range(steps):
        store.commit(state, live_a_step(state, index))
    store.close()  # no checkpoint: what a kill leaves
    return (path / "state.json").read_bytes()


def test_checkpoint_writes_the_current_state_whole(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    path = tmp_path / "being"
    stale = killed_between_checkpoints(path, 3)
    current = peek_state(str(path))
    assert current is not None and current.to_json() != stale
    done = cli("checkpoint", "--state-dir", str(path))
    assert done.code == 0, done.err
    assert json.loads(done.out) == {
        "state_dir": str(path),
        "replayed_steps": 3,
        "cycle": 0,
        "status": "starting",
    }
    data = (path / "state.json").read_bytes()
    assert data == current.to_json()
    assert parse_state(data).mind.memories == current.mind.memories  # being-v1 alone
    scanned = redo.scan((path / redo.REDO_FILE).read_bytes())
    assert scanned.records == [] and scanned.base == redo.checkpoint_id(data)
    again = cli("checkpoint", "--state-dir", str(path))
    assert again.code == 0 and json.loads(again.out)["replayed_steps"] == 0
    assert (path / "state.json").read_bytes() == data


def test_a_cleanly_stopped_being_is_already_current(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.text("done")]) as server:
        assert cli("once", *cli_args(tmp_path, server)).code == 0
    path = tmp_path / "being"
    before = (path / "state.json").read_bytes()
    done = cli("checkpoint", "--state-dir", str(path))
    assert done.code == 0, done.err
    assert json.loads(done.out)["replayed_steps"] == 0
    assert (path / "state.json").read_bytes() == before


def test_a_being_a_runtime_holds_is_refused_and_untouched(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    path = tmp_path / "being"
    stale = killed_between_checkpoints(path, 2)
    log = (path / redo.REDO_FILE).read_bytes()
    holder = DirectoryStore.open(str(path))
    try:
        refused = cli("checkpoint", "--state-dir", str(path))
    finally:
        holder.close()
    assert refused.code == 4
    assert refused.err.strip() == f"singularity: state: another runtime owns {path}"
    assert (path / "state.json").read_bytes() == stale
    assert (path / redo.REDO_FILE).read_bytes() == log


def test_nothing_to_checkpoint(tmp_path: Path, cli: Callable[..., Result]) -> None:
    missing = cli("checkpoint", "--state-dir", str(tmp_path / "none"))
    assert missing.code == 4
    assert f"no being state exists at {tmp_path / 'none' / 'state.json'}" in missing.err
    assert not (tmp_path / "none").exists()
    (tmp_path / "empty").mkdir(mode=0o700)
    empty = cli("checkpoint", "--state-dir", str(tmp_path / "empty"))
    assert empty.code == 4 and "no being state exists" in empty.err
    in_postgres = cli(
        "checkpoint", "--state-dir", str(tmp_path / "x"), SINGULARITY_STATE_URL=store_url()
    )
    assert in_postgres.code == 2
    assert "a being in a PostgreSQL state store (postgresql://" in in_postgres.err
    assert "has no state.json and no state.redo to checkpoint" in in_postgres.err
    by_flag = cli("checkpoint", "--state-url", store_url(), "--agent-id", "anyone")
    assert by_flag.code == 2 and "each committed step updates its rows" in by_flag.err
    assert not (tmp_path / "x").exists()
