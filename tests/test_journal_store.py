"""The journal's store contract, run against both backends: SQLite and PostgreSQL + pgvector.

The PostgreSQL run uses a real server started once for the session (tests/support/postgres.py).
Every test gets a fresh being directory, so a fresh keyring and so a fresh schema.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from singularity.journal.embedders import HashingEmbedder
from singularity.journal.keyring import Unreadable
from singularity.journal.opening import open_journal
from singularity.journal.records import MAX_ENTRIES_PER_DAY, Filter, JournalError, Row
from singularity.journal.service import CapReached, Journal
from tests.support.journal import config_of
from tests.support.postgres import postgres_server

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass
class Clock:
    """An injectable clock."""

    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make(tmp_path: Path, backend: str) -> Iterator[Callable[..., tuple[Journal, Clock]]]:
    opened: list[Journal] = []

    def factory(
        name: str = "being", clock: Clock | None = None, **config: Any
    ) -> tuple[Journal, Clock]:
        state_dir = tmp_path / name
        state_dir.mkdir(mode=0o700, exist_ok=True)
        url = postgres_server().url if backend == "postgresql" else None
        clock = clock or Clock()
        journal = open_journal(
            config_of(state_dir, url=url, **config), clock, embedder=HashingEmbedder()
        )
        assert journal is not None
        opened.append(journal)
        return journal, clock

    yield factory
    for journal in opened:
        journal.close()


def _raw(journal: Journal, sqlite_sql: str, pg_sql: str, *params: object) -> None:
    """Change a row behind the store's back, as an attacker with database access would."""
    store: Any = journal.store
    if store.backend == "sqlite":
        store.db.execute(sqlite_sql, params)
        store._vectors = None
    else:
        store.db.execute(pg_sql.replace("TABLE", f'{store.schema}."self"'), params)


def test_round_trip_write_recall_decrypt(make: Callable[..., tuple[Journal, Clock]]) -> None:
    journal, _ = make()
    first = journal.write(
        "the deploy failed and I blamed the network too quickly", "stressed", None
    )
    journal.write("tea in the garden, nothing to do, a quiet hour", "calm", None)
    assert not first.redacted
    found, failed = journal.recall("deploy failed network", 1)
    assert failed == 0
    assert [(hit.entry_id, hit.mood) for hit in found] == [(first.entry_id, "stressed")]
    assert found[0].text == "the deploy failed and I blamed the network too quickly"
    stored = journal.store.rows(ids=[first.entry_id])[0]
    assert b"deploy" not in stored.ciphertext and len(stored.nonce) == 12
    assert stored.embedding_model == HashingEmbedder.name
    vector = journal.vector_of(stored)
    assert vector is not None and vector.shape == (768,)
    # SQLite holds it sealed; PostgreSQL in the clear, for its index.
    assert (stored.sealed_embedding is not None) == (journal.store.backend == "sqlite")


def test_recall_filters_and_k(make: Callable[..., tuple[Journal, Clock]]) -> None:
    journal, clock = make()
    for index in range(25):
        journal.write(f"note {index} about the river", "calm" if index % 2 else "tired", "river")
        clock.advance(minutes=1)
    found, _ = journal.recall("river", 20)
    assert len(found) == 20
    tired, _ = journal.recall("river", 20, mood="tired")
    assert {hit.mood for hit in tired} == {"tired"} and len(tired) == 13
    recent, _ = journal.recall("river", 20, since=START + timedelta(minutes=20))
    assert len(recent) == 5
    seqs = sorted(row.seq or 0 for row in journal.store.rows(Filter(thread_id="river")))
    assert seqs == list(range(1, 26))


def test_redacted_entries_are_blank_and_never_recalled(
    make: Callable[..., tuple[Journal, Clock]],
) -> None:
    journal, _ = make()
    written = journal.write("reach me at someone@example.org about the river", None, None)
    assert written.redacted and written.categories == ["email"]
    row = journal.store.rows(ids=[written.entry_id])[0]
    assert row.redacted and row.embedding is None
    assert journal.keyring.open(row) == ""
    assert journal.recall("river example", 5)[0] == []


def test_daily_cap(make: Callable[..., tuple[Journal, Clock]]) -> None:
    journal, clock = make()
    for index in range(MAX_ENTRIES_PER_DAY):
        journal.write(f"entry {index}", None, None)
    with pytest.raises(CapReached):
        journal.write("one too many", None, None)
    clock.advance(hours=12)  # 00:00 UTC of the next day
    journal.write("a new day", None, None)


def test_purge_keeps_29_days_23_hours_and_drops_30_days_and_a_second(
    make: Callable[..., tuple[Journal, Clock]],
) -> None:
    journal, clock = make()
    old = journal.write("written first", None, None).entry_id
    clock.advance(hours=1)
    young = journal.write("written an hour later", None, None).entry_id
    clock.now = START + timedelta(days=29, hours=23)
    assert journal.purge() == 0
    assert journal.store.count() == 2
    clock.now = START + timedelta(days=30)
    assert journal.purge() == 0  # exactly the window: still kept
    clock.now = START + timedelta(days=30, seconds=1)
    assert journal.expired() == 1
    assert journal.purge() == 1
    assert [row.id for row in journal.store.rows()] == [young]
    assert journal.entry(old) is None
    clock.now = START  # a clock moving backwards resurrects nothing and purges nothing
    assert journal.purge() == 0 and journal.store.count() == 1


def test_expired_rows_are_not_recalled_before_the_purge(
    make: Callable[..., tuple[Journal, Clock]],
) -> None:
    journal, clock = make()
    journal.write("the lighthouse keeper", None, None)
    clock.advance(days=30, seconds=1)
    assert journal.recall("lighthouse keeper", 5)[0] == []


def test_promoted_rows_follow_the_setting(make: Callable[..., tuple[Journal, Clock]]) -> None:
    journal, clock = make(keep_promoted=True)
    kept = journal.write("worth keeping", None, None).entry_id
    journal.write("not promoted", None, None)
    row = journal.entry(kept)
    assert row is not None
    journal.mark_promoted(row, "reasonlog:x")
    clock.advance(days=31)
    assert journal.purge() == 1
    [left] = journal.store.rows()
    assert left.id == kept and left.promoted and left.promoted_ref == "reasonlog:x"


def test_key_rotation_reseals_everything_and_destroys_the_old_key(
    make: Callable[..., tuple[Journal, Clock]],
) -> None:
    journal, _ = make()
    ids = [journal.write(f"thought {index}", None, None).entry_id for index in range(5)]
    old_key = journal.keyring.current
    before = {row.id: row.ciphertext for row in journal.store.rows()}
    new_key, moved, failed = journal.rotate_key()
    assert (moved, failed) == (5, []) and new_key != old_key
    assert set(journal.keyring.keys) == {new_key}
    rows = journal.store.rows()
    assert {row.key_id for row in rows} == {new_key}
    assert all(before[row.id] != row.ciphertext for row in rows)
    assert sorted(journal.keyring.open(row) for row in rows) == [f"thought {i}" for i in range(5)]
    assert journal.verify().summary() == (5, [])
    assert sorted(ids) == sorted(row.id for row in rows)


def test_old_keys_are_shredded_once_no_row_needs_them(
    make: Callable[..., tuple[Journal, Clock]],
) -> None:
    journal, clock = make()
    first_key = journal.keyring.current
    journal.write("under the first key", None, None)
    saved = journal.store.rows()[0]
    clock.advance(days=31)
    journal.purge()  # the key is older than the window: a new one seals from now on
    assert journal.keyring.current != first_key
    assert first_key not in journal.keyring.keys
    with pytest.raises(Unreadable):
        journal.keyring.open(saved)  # a saved copy of the old ciphertext is now noise


BIT_FIELDS = ["nonce", "ciphertext", "tag"]


@pytest.mark.parametrize("field", BIT_FIELDS)
def test_flipping_a_bit_fails_authentication_and_verify_names_the_row(
    make: Callable[..., tuple[Journal, Clock]], field: str
) -> None:
    journal, _ = make()
    good = journal.write("an honest sentence", None, None).entry_id
    bad = journal.write("another honest sentence", None, None).entry_id
    row = journal.store.rows(ids=[bad])[0]
    data = bytearray(row.nonce if field == "nonce" else row.ciphertext)
    position = {"nonce": 5, "ciphertext": 3, "tag": len(data) - 2}[field]
    data[position] ^= 0x10
    if field == "nonce":
        row.nonce = bytes(data)
    else:
        row.ciphertext = bytes(data)
    journal.store.update(row)
    assert journal.verify().summary() == (2, [bad])
    with pytest.raises(Unreadable):
        journal.keyring.open(journal.store.rows(ids=[bad])[0])
    found, failed = journal.recall("honest sentence", 5)
    assert [hit.entry_id for hit in found] == [good] and failed == 1


@pytest.mark.parametrize("bound", ["id", "created_at", "key_id"])
def test_changing_a_bound_field_fails_authentication(
    make: Callable[..., tuple[Journal, Clock]], bound: str
) -> None:
    journal, _ = make()
    entry = journal.write("bound to its row", None, None).entry_id
    if bound == "id":
        other = "00000000-0000-4000-8000-000000000001"
        _raw(
            journal,
            "UPDATE entries SET id = ? WHERE id = ?",
            "UPDATE TABLE SET id = %s WHERE id = %s",
            other,
            entry,
        )
        entry = other
    elif bound == "created_at":
        _raw(
            journal,
            "UPDATE entries SET created_us = created_us + 1 WHERE id = ?",
            "UPDATE TABLE SET created_at = created_at + interval '1 microsecond' WHERE id = %s",
            entry,
        )
    else:
        journal.keyring.add_key(START)  # a second, valid key the row was not sealed with
        row = journal.store.rows(ids=[entry])[0]
        journal.store.update(replace(row, key_id=journal.keyring.current))
    assert journal.verify().summary() == (1, [entry])


def test_a_ciphertext_moved_to_another_row_fails(
    make: Callable[..., tuple[Journal, Clock]],
) -> None:
    journal, _ = make()
    source = journal.store.rows(
        ids=[journal.write("the original secret thought", None, None).entry_id]
    )[0]
    target_id = journal.write("an ordinary thought", None, None).entry_id
    target = journal.store.rows(ids=[target_id])[0]
    journal.store.update(replace(target, ciphertext=source.ciphertext, nonce=source.nonce))
    assert journal.verify().summary() == (2, [target_id])


def test_a_ciphertext_moved_to_another_being_fails(
    make: Callable[..., tuple[Journal, Clock]],
) -> None:
    mine, _ = make("mine")
    theirs, _ = make("theirs")
    source = mine.store.rows(ids=[mine.write("only mine to read", None, None).entry_id])[0]
    theirs.store.insert(replace(source, embedding=None))
    assert theirs.verify().summary() == (1, [source.id])
    # Even with the same key bytes, the journal id in the additional data binds the row.
    theirs.keyring.keys = dict(mine.keyring.keys)
    theirs.keyring.current = mine.keyring.current
    assert theirs.verify().summary() == (1, [source.id])


def test_vectors_of_another_model_are_never_compared(
    make: Callable[..., tuple[Journal, Clock]],
) -> None:
    journal, _ = make()
    entry = journal.write("the orchard in late autumn", None, None).entry_id
    row = journal.store.rows(ids=[entry])[0]
    foreign = np.ones(384, dtype=np.float32) / np.sqrt(384)
    journal.store.update(replace(row, embedding=foreign, embedding_model="other-model"))
    assert journal.store.nearest(HashingEmbedder.name, np.ones(768, np.float32), 5, Filter()) == []
    found, _ = journal.recall("orchard", 5)  # matched by substring, after decryption, in memory
    assert [(hit.entry_id, hit.score) for hit in found] == [(entry, None)]
    done, failed = journal.embed_pending()
    assert (done, failed) == (1, [])
    assert journal.store.rows(ids=[entry])[0].embedding_model == HashingEmbedder.name


def test_destroy_deletes_rows_and_key(make: Callable[..., tuple[Journal, Clock]]) -> None:
    journal, _ = make()
    journal.write("gone soon", None, None)
    path = journal.keyring.path
    journal.destroy()
    assert not os.path.exists(path)


def test_nearest_matches_a_brute_force_scan(make: Callable[..., tuple[Journal, Clock]]) -> None:
    journal, clock = make()
    words = [
        "river",
        "stone",
        "lantern",
        "orchard",
        "harbour",
        "violin",
        "meadow",
        "thunder",
        "copper",
        "velvet",
    ]
    for index in range(60):
        journal.write(" ".join(words[(index * 3 + j) % 10] for j in range(4)), None, None)
        clock.advance(seconds=1)
    query = HashingEmbedder().embed(["lantern orchard thunder"])[0]
    rows = journal.store.rows()
    vectors = [journal.vector_of(row) for row in rows]
    matrix = np.stack([vector for vector in vectors if vector is not None])
    exact = {rows[i].id for i in np.argsort(-(matrix @ query))[:5]}
    found = journal.store.nearest(HashingEmbedder.name, query, 5, Filter())
    assert len(found) == 5 and len({ident for ident, _ in found} & exact) >= 4


@pytest.mark.parametrize("backend", ["postgresql"])
def test_postgres_grants_nothing_to_other_roles(
    make: Callable[..., tuple[Journal, Clock]], backend: str
) -> None:
    import psycopg

    journal, _ = make()
    journal.write("not for outsiders", None, None)
    store: Any = journal.store
    server = postgres_server()
    admin = psycopg.connect(server.url, autocommit=True)
    admin.execute(
        "DO $$ BEGIN CREATE ROLE outsider LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )
    owner = admin.execute(
        "SELECT tableowner FROM pg_tables WHERE schemaname = %s AND tablename = 'self'",
        (store.schema,),
    ).fetchone()
    assert owner == ("postgres",)
    indexes = admin.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s", (store.schema,)
    ).fetchall()
    assert any(
        "hnsw" in definition and "vector_cosine_ops" in definition for (definition,) in indexes
    )
    admin.close()
    outsider = psycopg.connect(server.url.replace("postgres@", "outsider@"), autocommit=True)
    for statement in (
        f'SELECT count(*) FROM {store.schema}."self"',
        f'INSERT INTO {store.schema}."self" (id, created_at, content, nonce, key_id) '
        "VALUES (gen_random_uuid(), now(), '', '', 'k')",
        f'DELETE FROM {store.schema}."self"',
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            outsider.execute(statement)
    outsider.close()


def test_row_times_survive_the_round_trip_to_the_microsecond(
    make: Callable[..., tuple[Journal, Clock]],
) -> None:
    journal, clock = make()
    clock.now = START.replace(microsecond=123456)
    entry = journal.write("precise", None, None).entry_id
    row: Row = journal.store.rows(ids=[entry])[0]
    assert row.created_at == clock.now
    assert journal.keyring.open(row) == "precise"


def test_the_journal_connects_to_postgresql_as_the_state_store_does(tmp_path: Path) -> None:
    import psycopg

    from singularity.store.postgres.connection import CONNECT_TIMEOUT_SECS
    from singularity.store.postgres.store import connect

    state_dir = tmp_path / "being"
    state_dir.mkdir(mode=0o700)

    def opened(url: str) -> Journal | None:
        return open_journal(config_of(state_dir, url=url), Clock(), embedder=HashingEmbedder())

    with pytest.raises(JournalError) as unreachable:
        opened("postgresql://nobody:secret@127.0.0.1:1/none")
    said = str(unreachable.value)
    assert "cannot connect to the journal database postgresql://nobody@127.0.0.1:1/none" in said
    assert "secret" not in said
    with pytest.raises(JournalError, match=r"--journal-url postgresql://db/x\?bogus=1: not a"):
        opened("postgresql://db/x?bogus=1")  # refused before any connection, as --state-url is

    journal = opened(postgres_server().url)
    assert journal is not None
    store = connect(postgres_server().url)
    try:
        link: Any = journal.store
        timeouts = {
            psycopg.conninfo.conninfo_to_dict(db.info.dsn).get("connect_timeout")
            for db in (link.db, store)
        }
        assert timeouts == {str(CONNECT_TIMEOUT_SECS)}
    finally:
        store.close()
        journal.close()
