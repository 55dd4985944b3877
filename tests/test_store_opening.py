"""`singularity.store.opening`: a place from the options, and a being opened or peeked there."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from singularity.errors import ConfigurationError, StateLockedError
from singularity.store.base import NoBeing
from singularity.store.directory import DirectoryStore
from singularity.store.opening import StorePlace, open_store_at, peek_state_at
from tests.support.stores import a_being, agent_rows, live_a_step, store_url


@pytest.mark.parametrize(
    ("url", "backend", "location"),
    [
        (
            "postgresql://user@db.example/beings",
            "postgresql",
            "postgresql://user@db.example/beings",
        ),
        ("postgres:///beings?host=/run/pg", "postgresql", "postgres:///beings?host=/run/pg"),
        ("file:///srv/beings/a", "directory", "/srv/beings/a"),
        ("file://localhost/srv/my%20being", "directory", "/srv/my being"),
        ("relative/dir", "directory", "relative/dir"),
        ("/abs/dir", "directory", "/abs/dir"),
    ],
)
def test_a_url_names_its_backend(url: str, backend: str, location: str) -> None:
    place = StorePlace.parse(url)
    assert (place.backend, place.location) == (backend, location)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://db/beings", "unknown scheme 'mysql'"),
        ("file://elsewhere/srv/a", "a file URL names a local path"),
        ("file:///srv/a?x=1", "takes no query"),
        ("file://", "empty path"),
        ("", "empty path"),
        ("postgresql://u@h/db?sslmode", "not a valid URL"),
    ],
)
def test_a_bad_url_is_refused_saying_why(url: str, said: str) -> None:
    with pytest.raises(ConfigurationError, match=said) as refused:
        StorePlace.parse(url)
    assert "--state-url" in str(refused.value)


def test_a_password_is_never_shown() -> None:
    place = StorePlace.parse("postgresql://me:hunter2@db.example:5433/beings")
    assert "hunter2" not in place.shown()
    assert place.label("a") == "being a in postgresql://me@db.example:5433/beings"
    with pytest.raises(ConfigurationError) as refused:
        StorePlace.parse("postgresql://me:hunter2@db.example/beings?sslmode")
    assert "hunter2" not in str(refused.value)


def test_state_url_wins_over_state_dir() -> None:
    assert StorePlace.chosen(".singularity", None) == StorePlace("directory", ".singularity")
    assert StorePlace.chosen(".singularity", "file:///x").location == "/x"


def test_a_directory_being_opened_and_peeked(tmp_path: Path) -> None:
    place = StorePlace.directory(str(tmp_path / "being"))
    assert peek_state_at(place, "local") is None
    store = open_store_at(place, "local")
    assert isinstance(store, DirectoryStore)
    state = a_being()
    assert store.load() is None
    store.commit(state, [])
    events = live_a_step(state, 1)
    store.commit(state, events)
    try:
        with pytest.raises(StateLockedError):
            open_store_at(place, "local")
        peeked = peek_state_at(place, "local")
        assert peeked is not None and peeked.to_json() == state.to_json()
    finally:
        store.close()


def test_a_postgres_being_peeked_while_its_runtime_holds_the_lease() -> None:
    place = StorePlace.parse(store_url())
    agent = f"agent-{uuid.uuid4().hex[:12]}"
    other = f"agent-{uuid.uuid4().hex[:12]}"
    assert peek_state_at(place, agent) is None
    store = open_store_at(place, agent)
    try:
        state = a_being(agent)
        assert store.load() is None
        store.commit(state, [])
        store.commit(state, live_a_step(state, 1))
        with pytest.raises(StateLockedError, match=f"another runtime owns being {agent}"):
            open_store_at(place, agent)
        peeked = peek_state_at(place, agent)
        assert peeked is not None and peeked.to_json() == state.to_json()
        assert peek_state_at(place, other) is None
    finally:
        store.close()
    again = open_store_at(place, agent)  # released at close: taken at once
    try:
        loaded = again.load()
        assert loaded is not None and loaded.to_json() == state.to_json()
    finally:
        again.close()


def _empty_database() -> str:
    """The URL of a new database on the session's server, never migrated."""
    import psycopg

    server_url = store_url()
    name = f"empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return f"{server_url.rsplit('/', 1)[0]}/{name}"


def test_a_store_never_migrated_holds_no_being() -> None:
    assert peek_state_at(StorePlace.parse(_empty_database()), "local") is None


def test_an_unknown_being_opened_without_create_leaves_no_row() -> None:
    place = StorePlace.parse(store_url())
    known = f"agent-{uuid.uuid4().hex[:12]}"
    born = open_store_at(place, known)  # the store holds a being, just not the ghost
    try:
        assert born.load() is None
        born.commit(a_being(known), [])
    finally:
        born.close()
    ghost = f"agent-{uuid.uuid4().hex[:12]}"
    with pytest.raises(NoBeing, match=f"no being state exists for being {ghost} in postgresql"):
        open_store_at(place, ghost, create=False)
    rows = agent_rows(ghost)
    assert {"beings", "leases", "activity", "places", "sanctum_files"} <= rows.keys()
    assert set(rows.values()) == {0}
    again = open_store_at(place, known, create=False)  # a being that is there is opened
    try:
        loaded = again.load()
        assert loaded is not None and loaded.identity.agent_id == known
    finally:
        again.close()


def test_a_store_never_migrated_stays_so_when_opened_without_create() -> None:
    import psycopg

    url = _empty_database()
    with pytest.raises(NoBeing):
        open_store_at(StorePlace.parse(url), "local", create=False)
    with psycopg.connect(url, autocommit=True) as db:
        schema = db.execute("SELECT to_regnamespace('singularity')").fetchone()
    assert schema is not None and schema[0] is None
