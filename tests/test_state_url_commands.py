"""`journal`, `reasonlog`, `import` and `children` on a being in a PostgreSQL store.

A being lives a cycle in the session's real PostgreSQL server on the scripted gateway and
writes a private journal entry (kept where the runtime keeps it: its local state
directory's SQLite file, or the PostgreSQL journal on the same server). The journal
commands read and maintain it, taking the being's lease where they write; `reasonlog`
reads the public reasonlog the being appended to in its local state directory; `import`
merges a mind into the stopped being under its lease and reaches a living one through
its import socket. `children` reads the family tree of a being in the store: children in
their own state directories, and a fleet's children that are beings of the store. An
unknown agent id is refused with a clear error and nothing is written to the store.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from singularity.domain.records import ChildRecord
from singularity.store.opening import StorePlace, open_store_at, peek_events_at, peek_state_at
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.loop_http import Result, cli_args
from tests.support.polling import wait_for
from tests.support.stores import a_being, agent_rows, store_url

FIXTURES = Path(__file__).parent / "fixtures" / "import"
WRITE = "singularity_journal_write"
REASON = "singularity_reasonlog_append"
SECRET = "the lantern is behind the blue door"


def new_agent() -> str:
    return f"agent-{uuid.uuid4().hex[:12]}"


def in_store(root: Path, server: ScriptedServer, agent: str, *extra: str) -> list[str]:
    """Flags of `once` for the being `agent` in the store, its local files in `root/being`."""
    return [*cli_args(root, server, *extra), "--state-url", store_url(), "--agent-id", agent]


def journaling_being(root: Path, cli: Callable[..., Result], *extra: str) -> str:
    """A being in the store that lived one cycle and wrote one journal entry; its agent id."""
    agent = new_agent()
    script = [Turn.tool_call(WRITE, {"text": SECRET, "mood": "calm"}), Turn.text("done")]
    with ScriptedServer(script) as server:
        lived = cli("once", *in_store(root, server, agent, "--journal-embedder", "hashing", *extra))
    assert lived.code == 0, lived.err
    return agent


@pytest.mark.parametrize("journal_in_postgres", [False, True], ids=["sqlite", "postgresql"])
def test_the_journal_of_a_being_in_postgres(
    tmp_path: Path, cli: Callable[..., Result], journal_in_postgres: bool
) -> None:
    journal_url = ("--journal-url", store_url()) if journal_in_postgres else ()
    agent = journaling_being(tmp_path, cli, *journal_url)
    local = tmp_path / "being"
    at = ["--state-url", store_url(), "--agent-id", agent, "--state-dir", str(local), *journal_url]

    stats = cli("journal", "stats", *at)
    assert stats.code == 0, stats.err
    report = json.loads(stats.out)
    assert report["entries"] == 1 and report["by_mood"] == {"calm": 1}
    assert report["backend"] == ("postgresql" if journal_in_postgres else "sqlite")
    assert SECRET not in stats.out
    verified = cli("journal", "verify", *at)
    assert verified.code == 0, verified.err
    assert json.loads(verified.out)["checked"] == 1

    rotated = cli("journal", "rotate-key", *at)
    assert rotated.code == 0, rotated.err
    assert json.loads(rotated.out)["re_encrypted"] == 1
    assert cli("journal", "purge", *at).code == 0
    by_variable = cli(
        "journal", "stats", "--agent-id", agent, "--state-dir", str(local), *journal_url,
        SINGULARITY_STATE_URL=store_url(),
    )  # fmt: skip
    assert by_variable.code == 0, by_variable.err
    assert json.loads(by_variable.out)["entries"] == 1


def test_the_reasonlog_of_a_being_in_postgres(tmp_path: Path, cli: Callable[..., Result]) -> None:
    agent = new_agent()
    script = [
        Turn.tool_call(REASON, {"thought": "first, read the ledger", "step_index": 1}),
        Turn.tool_call(REASON, {"thought": "then pay the rent", "step_index": 2}),
        Turn.text("done"),
    ]
    with ScriptedServer(script) as server:
        lived = cli("once", *in_store(tmp_path, server, agent))
    assert lived.code == 0, lived.err
    local = tmp_path / "being"
    at = ["--state-url", store_url(), "--agent-id", agent, "--state-dir", str(local)]

    tail = cli("reasonlog", "tail", *at)
    assert tail.code == 0, tail.err
    entries = [json.loads(line) for line in tail.out.splitlines()]
    thoughts = [entry["thought"] for entry in entries]
    assert thoughts == ["first, read the ledger", "then pay the rent"]
    assert [entry["step_index"] for entry in entries] == [1, 2]
    newest = cli("reasonlog", "tail", "-n", "1", *at)
    assert [json.loads(line)["thought"] for line in newest.out.splitlines()] == [
        "then pay the rent"
    ]
    shown = cli("reasonlog", "show", entries[0]["id"], *at)
    assert shown.code == 0, shown.err
    assert json.loads(shown.out) == entries[0]
    missing = cli("reasonlog", "show", "no-such-id", *at)
    assert missing.code == 4 and "no reasonlog entry has id no-such-id" in missing.err
    by_variable = cli(
        "reasonlog", "tail", "--agent-id", agent, "--state-dir", str(local),
        SINGULARITY_STATE_URL=store_url(),
    )  # fmt: skip
    assert by_variable.code == 0 and by_variable.out == tail.out

    holder = open_store_at(StorePlace.parse(store_url()), agent)  # as a living runtime would
    try:
        read = cli("reasonlog", "tail", *at)  # a read needs no hold
    finally:
        holder.close()
    assert read.code == 0 and read.out == tail.out


def test_journal_maintenance_waits_for_the_lease(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = journaling_being(tmp_path, cli)
    at = ["--state-url", store_url(), "--agent-id", agent, "--state-dir", str(tmp_path / "being")]
    key = (tmp_path / "being" / "journal.key").read_bytes()
    holder = open_store_at(StorePlace.parse(store_url()), agent)
    try:
        for command in (["rotate-key"], ["purge"], ["embed"], ["salvage"], ["destroy", "--yes"]):
            refused = cli("journal", *command, *at)
            assert refused.code == 4, command
            assert f"another runtime owns being {agent} in postgresql://" in refused.err, command
        read = cli("journal", "stats", *at)  # a read needs no hold
        assert read.code == 0 and json.loads(read.out)["entries"] == 1
    finally:
        holder.close()
    assert (tmp_path / "being" / "journal.key").read_bytes() == key
    destroyed = cli("journal", "destroy", "--yes", *at)
    assert destroyed.code == 0, destroyed.err
    assert json.loads(destroyed.out) == {"destroyed": 1}


def test_an_unknown_agent_id_is_refused_and_nothing_is_written(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    journaling_being(tmp_path, cli)  # the store holds a being, just not this one
    ghost = new_agent()
    local = tmp_path / "being"
    at = ["--state-url", store_url(), "--agent-id", ghost, "--state-dir", str(local)]
    files = sorted(path.name for path in local.iterdir())
    for command in (
        ["journal", "stats"],
        ["journal", "rotate-key"],
        ["journal", "destroy", "--yes"],
        ["reasonlog", "tail"],
        ["reasonlog", "show", "any-id"],
    ):
        refused = cli(*command, *at)
        assert refused.code == 4, command
        assert f"no being at being {ghost} in postgresql://" in refused.err, command
    stamped = cli("sanctum", "tend", "--stamp", *at)  # the one sanctum command that writes
    assert stamped.code == 4 and f"no being {ghost} in postgresql://" in stamped.err
    imported = cli("import", "--file", str(FIXTURES / "valid.json"), *at)
    assert imported.code == 4
    assert f"no being state exists for being {ghost} in postgresql://" in imported.err
    assert "create the being before importing" in imported.err
    exported = cli("export", *at, "--to", str(tmp_path / "copy"))
    assert exported.code == 4 and f"no being {ghost} in postgresql://" in exported.err
    assert not (tmp_path / "copy").exists()
    rows = agent_rows(ghost)
    assert {"beings", "leases", "activity", "places", "sanctum_files"} <= rows.keys()
    assert set(rows.values()) == {0}, rows
    assert sorted(path.name for path in local.iterdir()) == files


def test_import_into_a_stopped_being_in_postgres(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = journaling_being(tmp_path, cli)
    place = StorePlace.parse(store_url())
    at = ["--state-url", store_url(), "--agent-id", agent]
    done = cli("import", "--file", str(FIXTURES / "valid.json"), *at)
    assert done.code == 0, done.err
    report = json.loads(done.out)
    assert report["accepted"] and report["imported"] > 0
    state = peek_state_at(place, agent)
    assert state is not None
    assert any(memory.sources for memory in state.mind.memories)
    assert peek_events_at(place, agent)[-1]["type"] == "mind_imported"
    verified = cli("verify", *at)
    assert verified.code == 0, verified.out + verified.err

    before = state.to_json()
    events = len(peek_events_at(place, agent))
    refused = cli("import", "--file", str(FIXTURES / "changed.json"), *at)
    assert refused.code == 4 and "import refused" in refused.err
    after = peek_state_at(place, agent)
    assert after is not None and after.to_json() == before
    assert len(peek_events_at(place, agent)) == events
    holder = open_store_at(place, agent)
    try:
        held = cli("import", "--file", str(FIXTURES / "valid.json"), *at)
    finally:
        holder.close()
    assert held.code == 4
    assert f"another runtime owns being {agent}" in held.err and "stop it first" in held.err


def test_import_into_a_living_being_in_postgres_goes_through_its_socket(
    tmp_path: Path,
) -> None:
    agent = new_agent()
    local = tmp_path / "being"
    with ScriptedServer([Turn.text("alive")] * 50) as server:
        flags = [*in_store(tmp_path, server, agent), "--cycle-interval-secs", "3600"]
        runtime = subprocess.Popen(
            [str(SINGULARITY), "run", *flags],
            env=clean_environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(lambda: (local / "state-import.sock").exists(), "the import socket")
            done = subprocess.run(
                [
                    str(SINGULARITY), "import", "--file", str(FIXTURES / "valid.json"),
                    "--state-url", store_url(), "--agent-id", agent,
                ],
                env=clean_environment(),
                capture_output=True,
                text=True,
                timeout=180,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["accepted"]
        finally:
            runtime.send_signal(signal.SIGTERM)
            _, err = runtime.communicate(timeout=180)
    assert runtime.returncode == 0, err
    state = peek_state_at(StorePlace.parse(store_url()), agent)
    assert state is not None
    assert any(memory.sources for memory in state.mind.memories)


def test_a_journal_command_needs_the_local_state_directory(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = journaling_being(tmp_path, cli)
    moved = tmp_path / "elsewhere"
    shutil.move(tmp_path / "being", moved)
    at = ["--state-url", store_url(), "--agent-id", agent, "--state-dir", str(tmp_path / "being")]
    missing = cli("journal", "stats", *at)
    assert missing.code == 4 and f"no journal exists for the being at {tmp_path / 'being'}" in (
        missing.err
    )
    found = cli("journal", "stats", *at[:-1], str(moved))
    assert found.code == 0 and json.loads(found.out)["entries"] == 1


def test_the_children_of_a_being_in_postgres(tmp_path: Path, cli: Callable[..., Result]) -> None:
    place, parent, local = StorePlace.parse(store_url()), new_agent(), tmp_path / "being"
    in_dir, in_store_id, unborn = (str(uuid.uuid4()) for _ in range(3))
    child_dir = local / "children" / in_dir
    child_dir.parent.mkdir(parents=True)
    at = "2026-01-01T00:00:00Z"
    own = open_store_at(StorePlace.directory(str(child_dir)), in_dir)  # a child of `once`
    try:
        assert own.load() is None
        own.commit(a_being(in_dir), [])
    finally:
        own.close()
    fleet_child = open_store_at(place, in_store_id)  # a fleet's child: a being of the store
    try:
        assert fleet_child.load() is None
        fleet_child.commit(a_being(in_store_id), [])
    finally:
        fleet_child.close()
    state = a_being(parent)
    for child_id, name in ((in_dir, "Dir"), (in_store_id, "Pg"), (unborn, "Unborn")):
        place_of_child = str(local / "children" / child_id)
        state.mind.children.append(
            ChildRecord(
                id=child_id, name=name, ticker=name.upper()[:3], state_dir=place_of_child,
                created_at=at, status="funded",
            )
        )  # fmt: skip
    store = open_store_at(place, parent)
    try:
        assert store.load() is None
        store.commit(state, [])
    finally:
        store.close()

    flags = ["--state-url", store_url(), "--agent-id", parent, "--state-dir", str(local)]
    holder = open_store_at(place, in_store_id)  # the fleet's child is living
    try:
        shown = cli("children", "--json", *flags)
    finally:
        holder.close()
    assert shown.code == 0, shown.err
    tree = {entry["name"]: entry for entry in json.loads(shown.out)}
    assert tree["Dir"]["balance_usd"] == "10" and not tree["Dir"]["alive"]
    assert tree["Dir"]["state_dir"] == str(child_dir) and "place" not in tree["Dir"]
    assert tree["Pg"]["alive"] and tree["Pg"]["place"] == place.label(in_store_id)
    assert tree["Pg"]["cycle"] == 0 and tree["Pg"]["children"] == []
    assert tree["Unborn"]["status"] == "not started"
    text = cli("children", *flags)
    assert text.code == 0 and f"being {parent} in postgresql://" in text.out
    assert "Dir (DIR)" in text.out and "Unborn (UNB) not started" in text.out

    ghost = new_agent()
    missing = cli("children", "--state-url", store_url(), "--agent-id", ghost)
    assert missing.code == 4
    assert f"no being state exists for being {ghost} in postgresql://" in missing.err
    rows = agent_rows(ghost)
    assert {"beings", "leases", "activity", "places", "sanctum_files"} <= rows.keys()
    assert set(rows.values()) == {0}, rows
