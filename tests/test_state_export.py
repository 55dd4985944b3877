"""Moving a being between a state directory and a real PostgreSQL store, whole.

A being that lived steps (messages archived, memories, journal lines, a sanctum) goes
to PostgreSQL and back to a new directory with the same `state.json`, `activity.jsonl`,
`conversation.jsonl` and sanctum files, byte for byte; a place that holds a being is never
overwritten; a kill at any point of an export leaves no being at the target.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from singularity.errors import StateError, StateLockedError
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.sanctum.entries import SanctumEntry
from singularity.store import transfer
from singularity.store.directory import DirectoryStore
from singularity.store.opening import StorePlace
from singularity.store.postgres.store import PostgresStore
from tests.support.failpoints import armed_environment
from tests.support.files import tree
from tests.support.stores import a_being, archive_overflow, live_a_step, store_url

FILES = ("state.json", "activity.jsonl", "conversation.jsonl")


def lived_directory(path: Path, agent_id: str, steps: int = 12) -> None:
    """A being at `path` that lived `steps` steps (some messages archived) and stopped."""
    store = DirectoryStore.open(str(path))
    try:
        assert store.load() is None
        state = a_being(agent_id)
        store.commit(state, [{"type": "started", "at": "2026-01-01T00:00:00Z"}])
        for index in range(steps):
            events = live_a_step(state, index)
            if index % 5 == 4:
                archive_overflow(state, keep=3)
            store.commit(state, events)
        store.checkpoint(state)
    finally:
        store.close()
    sanctum = path / "sanctum"
    sanctum.mkdir(mode=0o700)
    (sanctum / "memory" / "topics").mkdir(parents=True, mode=0o700)
    (sanctum / "raw").mkdir(mode=0o700)
    (sanctum / "PERSONA.md").write_text("# Persona\n\n- Name: Sage ✓\n")
    (sanctum / "memory" / "topics" / "pricing.md").write_bytes(b"# Pricing\n\n42\n")


def to_postgres(source: Path, agent_id: str) -> None:
    store = DirectoryStore.open(str(source), create=False)
    try:
        being = transfer.read_being(store)
    finally:
        store.close()
    target = PostgresStore.open(store_url(), agent_id)
    try:
        transfer.write_postgres(being, target)
    finally:
        target.close()


def to_directory(agent_id: str, destination: Path) -> None:
    store = PostgresStore.open(store_url(), agent_id)
    try:
        being = transfer.read_being(store)
    finally:
        store.close()
    transfer.write_directory(being, str(destination))


def test_a_round_trip_through_postgresql_gives_the_same_files(tmp_path: Path) -> None:
    agent = f"agent-{os.urandom(6).hex()}"
    source, back = tmp_path / "source", tmp_path / "back"
    lived_directory(source, agent)
    to_postgres(source, agent)
    to_directory(agent, back)
    for name in FILES:
        assert (back / name).read_bytes() == (source / name).read_bytes(), name
    assert tree(back / "sanctum") == tree(source / "sanctum")
    assert verify_state_dir(str(back)) == verify_state_dir(str(source))  # the steps are synthetic
    assert os.stat(back).st_mode & 0o777 == 0o700


def test_a_place_holding_a_being_is_never_overwritten(tmp_path: Path) -> None:
    agent = f"agent-{os.urandom(6).hex()}"
    source = tmp_path / "source"
    lived_directory(source, agent)
    to_postgres(source, agent)
    with pytest.raises(StateError, match="already exists; export writes only a new being"):
        to_postgres(source, agent)
    with pytest.raises(StateError, match="already exists; a being is written only to a new"):
        to_directory(agent, source)
    assert (source / "state.redo").exists()  # untouched


def test_a_being_keeps_its_agent_id(tmp_path: Path) -> None:
    source = tmp_path / "source"
    lived_directory(source, "the-first")
    with pytest.raises(StateError, match="agent id is the-first, not someone-else"):
        to_postgres(source, "someone-else")


def test_a_living_being_is_not_copied(tmp_path: Path) -> None:
    agent = f"agent-{os.urandom(6).hex()}"
    source = tmp_path / "source"
    lived_directory(source, agent)
    in_directory, in_postgres = StorePlace.directory(str(source)), StorePlace.parse(store_url())
    transfer.copy_being(in_directory, in_postgres, None)
    for place, store in (
        (in_directory, DirectoryStore.open(str(source), create=False)),
        (in_postgres, PostgresStore.open(store_url(), agent)),
    ):
        try:
            with pytest.raises(StateLockedError, match="another runtime owns"):
                transfer.copy_being(place, StorePlace.directory(str(tmp_path / "out")), agent)
        finally:
            store.close()
    assert sorted(os.listdir(tmp_path)) == ["source"]
    with pytest.raises(StateError, match="is both the source and the target"):
        transfer.copy_being(in_postgres, in_postgres, agent)


def test_a_sanctum_path_that_leaves_the_sanctum_is_refused(tmp_path: Path) -> None:
    being = transfer.WholeBeing(a_being(), [], [], [SanctumEntry("../escape", b"x")])
    with pytest.raises(StateError, match="is not a path within it"):
        transfer.write_directory(being, str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == []


KILL_SCRIPT = """
import sys
from singularity.store import transfer
from singularity.store.directory import DirectoryStore
from singularity.store.opening import StorePlace
from singularity.store.postgres.store import PostgresStore

source, url, agent, destination = sys.argv[1:]
store = DirectoryStore.open(source, create=False)
being = transfer.read_being(store)
store.close()
if destination == "-":
    target = PostgresStore.open(url, agent)
    transfer.write_postgres(being, target)
else:
    transfer.write_directory(being, destination)
"""


@pytest.mark.parametrize(
    "point", ["export.write@2", "sanctum-export.fsync@2", "export.rename", "export.commit"]
)
def test_a_kill_during_an_export_leaves_no_being(tmp_path: Path, point: str) -> None:
    agent = f"agent-{os.urandom(6).hex()}"
    source, destination = tmp_path / "source", tmp_path / "out"
    lived_directory(source, agent)
    into_postgres = point == "export.commit"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            KILL_SCRIPT,
            str(source),
            store_url(),
            agent,
            "-" if into_postgres else str(destination),
        ],
        env=armed_environment(point.replace("@", "=kill@") if "@" in point else f"{point}=kill"),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == -9, done.stderr.decode()
    assert not destination.exists()
    assert all(name.startswith(".out.") for name in os.listdir(tmp_path) if name != "source")
    if into_postgres:
        target = PostgresStore.open(store_url(), f"{agent}-other")
        try:
            held = target.db.execute(
                "SELECT count(*) FROM singularity.beings WHERE agent_id = %s", (agent,)
            ).fetchone()
        finally:
            target.close()
        assert held == (0,)


def test_a_postgresql_being_takes_the_sanctum_folder_it_is_given(tmp_path: Path) -> None:
    agent = f"agent-{os.urandom(6).hex()}"
    source, back, local = tmp_path / "source", tmp_path / "back", tmp_path / "local"
    lived_directory(source, agent)
    to_postgres(source, agent)
    local.mkdir(mode=0o700)
    (local / "PERSONA.md").write_bytes(b"# Persona\n\nlived on in PostgreSQL\n")
    in_postgres = StorePlace.parse(store_url())
    transfer.copy_being(
        in_postgres, StorePlace.directory(str(back)), agent, sanctum_root=str(local)
    )
    assert tree(back / "sanctum") == tree(local)
