"""The PostgreSQL state store's schema: named migrations, recorded, applied once, in order.

Against fresh databases of the session's real PostgreSQL server: a first `migrate`
applies every migration in the order `MIGRATIONS` names them and records each; a second
applies none; runtimes migrating one database at once apply each migration once between
them; a database that records a migration this version does not know is refused with
nothing applied; a migration that fails leaves neither its tables nor its record.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from singularity.errors import StateError
from singularity.sanctum.entries import SanctumEntry
from singularity.store.postgres import migrations
from singularity.store.postgres.migrations import MIGRATIONS, applied, migrate
from singularity.store.postgres.sanctum import latest
from singularity.store.postgres.sanctum_rows import held_sanctum
from singularity.store.postgres.store import PostgresStore
from tests.support.stores import AT, a_being, store_url

NAMES = [name for name, _ in MIGRATIONS]


@pytest.fixture
def database() -> Iterator[str]:
    """The URL of a new, empty database on the session's server."""
    server_url = store_url()
    name = f"migrations_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield f"{server_url.rsplit('/', 1)[0]}/{name}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@contextlib.contextmanager
def opened(url: str, agent: str) -> Iterator[PostgresStore]:
    """The being's store, open, closed after."""
    store = PostgresStore.open(url, agent)
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def opened_before(url: str, agent: str, migration: str) -> Iterator[PostgresStore]:
    """The being's store opened by a runtime that knows the migrations before `migration`
    only (what an older version wrote), closed after."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(migrations, "MIGRATIONS", MIGRATIONS[: NAMES.index(migration)])
        with opened(url, agent) as store:
            yield store


def connected(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def latest_of(url: str, agent: str) -> list[SanctumEntry]:
    with connected(url) as db:
        return latest(db, agent) or []


def tables(db: psycopg.Connection[Any]) -> set[str]:
    found = db.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'singularity'"
    ).fetchall()
    return {str(name) for (name,) in found}


def test_every_migration_is_applied_once_in_order_and_recorded(database: str) -> None:
    assert sorted(NAMES) == NAMES and len(set(NAMES)) == len(NAMES)  # named, in order
    with connected(database) as db:
        assert migrate(db) == NAMES
        assert applied(db) == NAMES
        assert {"beings", "leases", "activity", "sanctum_files", "places"} <= tables(db)
        assert migrate(db) == []
        assert applied(db) == NAMES
        counted = db.execute("SELECT count(*) FROM singularity.migrations").fetchone()
        assert counted == (len(NAMES),)


def test_runtimes_migrating_at_once_apply_each_migration_once(database: str) -> None:
    start = threading.Barrier(3)

    def one_runtime() -> list[str]:
        with connected(database) as db:
            start.wait(timeout=60)
            return migrate(db)

    with ThreadPoolExecutor(max_workers=3) as pool:
        running = [pool.submit(one_runtime) for _ in range(3)]
        done = [each.result(timeout=120) for each in running]
    assert sorted(done, key=len) == [[], [], NAMES]
    with connected(database) as db:
        assert applied(db) == NAMES


def test_a_store_migrated_by_a_newer_version_is_refused(database: str) -> None:
    with connected(database) as db:
        migrate(db)
        db.execute("INSERT INTO singularity.migrations (name) VALUES ('9999_from_the_future')")
        with pytest.raises(StateError, match=r"migrated by a newer version .*9999_from_the_future"):
            migrate(db)
        assert applied(db) == [*NAMES, "9999_from_the_future"]


def test_a_failing_migration_leaves_neither_its_tables_nor_its_record(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connected(database) as db:
        migrate(db)
        broken = (
            "9998_broken",
            "CREATE TABLE singularity.half_made (id int); SELECT no_such_function();",
        )
        monkeypatch.setattr(migrations, "MIGRATIONS", (*MIGRATIONS, broken))
        with pytest.raises(psycopg.Error, match="no_such_function"):
            migrate(db)
        assert applied(db) == NAMES
        assert "half_made" not in tables(db)
        monkeypatch.undo()
        assert migrate(db) == []


def test_a_being_written_before_0008_reads_back_and_lives_on_after_it(database: str) -> None:
    # Its messages carry no archived count: the being's own column is read until they do.
    state = a_being("old")
    state.conversation = [{"role": "user", "content": f"m{index}"} for index in range(3, 6)]
    state.mind.conversation_archived = 3
    archive = [{"role": "user", "content": f"m{index}"} for index in range(3)]
    with opened_before(database, "old", "0008_archived_in_messages") as store:
        store.create(state, [{"type": "started", "at": AT}], archive)
    for step in range(4):
        with opened(database, "old") as store:
            loaded = store.load()
            assert loaded is not None and loaded.to_json() == state.to_json()
            assert store.archived() == archive
            state = loaded  # what the store's tracker knows
            if step == 3:
                break
            if step == 0:  # the window's start moves with no new message
                archive.append(state.conversation.pop(0))
            else:
                state.conversation.append({"role": "user", "content": f"n{step}"})
                archive.append(state.conversation.pop(0))
            state.mind.conversation_archived += 1
            store.commit(state, [])


def test_a_being_written_before_0009_reads_back_and_lives_on_after_it(database: str) -> None:
    # Its events carry no updated_at: the being's own column is read until one does.
    state = a_being("old")
    state.updated_at = "2026-01-01T00:00:01Z"
    with opened_before(database, "old", "0009_updated_in_events") as store:
        store.create(state, [{"type": "started", "at": AT}, {"type": "warned", "at": AT}], [])
    steps = [("2026-01-01T00:00:03Z", False), ("2026-01-01T00:00:04Z", True), (None, None)]
    for updated_at, journaled in steps:
        with opened(database, "old") as store:
            loaded = store.load()
            assert loaded is not None and loaded.to_json() == state.to_json()
            if updated_at is None:
                break
            state = loaded  # what the store's tracker knows
            state.updated_at = updated_at
            store.commit(state, [{"type": "warned", "at": AT}] if journaled else [])


def test_a_sanctum_written_before_0010_reads_back_and_lives_on_after_it(database: str) -> None:
    # Its appends were whole versions (as every version then was): they read as whole files.
    with opened_before(database, "old", "0010_sanctum_appends") as store:
        store.create(a_being("old"), [{"type": "started", "at": AT}], [])
        store.db.execute(  # what a runtime before 0010 wrote: a file, then an append to it
            "INSERT INTO singularity.sanctum_files (agent_id, path, version, content, epoch) "
            "VALUES ('old', 'notes/', 1, '', 1), ('old', 'notes/day.md', 1, 'one\n', 1), "
            "('old', 'notes/day.md', 2, 'one\ntwo\n', 1)"
        )
    expected = b"one\ntwo\n"
    for appended in (b"three\n", b"four\n", None):
        with opened(database, "old") as store:
            assert store.load() is not None
            sanctum = held_sanctum(store, "/nonexistent")
            try:
                assert sanctum.read_bytes(("notes", "day.md")) == expected
                if appended is None:
                    break
                sanctum.append(("notes", "day.md"), appended)
                store.commit(a_being("old"), [{"type": "warned", "at": AT}])
                expected += appended
            finally:
                sanctum.close()
    with connected(database) as db:
        rows = db.execute(
            "SELECT version, content, appended FROM singularity.sanctum_files "
            "WHERE agent_id = 'old' AND path = 'notes/day.md' ORDER BY version"
        ).fetchall()
        assert [(v, bytes(c), a) for v, c, a in rows] == [
            (1, b"one\n", False),
            (2, b"one\ntwo\n", False),
            (3, b"three\n", True),
            (4, b"four\n", True),
        ]
    assert {entry.path: entry.content for entry in latest_of(database, "old")} == {
        "notes/": None,
        "notes/day.md": expected,
    }
