"""What `journal.sqlite3` gives away without the key: neither meaning nor length.

An attacker holding only the database file and the public model (all-MiniLM-L6-v2) tries
to tell which of many candidate sentences each private entry is. With the vectors in the
clear (what PostgreSQL keeps for its index) the attack names every entry; against the
sealed vectors of the SQLite file it does no better than chance, and no entry's vector
appears in the file in any form. Texts are padded to buckets, so ciphertext lengths say
only the bucket. Vectors an older version stored in the clear are sealed on open.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from singularity.journal import minilm
from singularity.journal.embedders import HashingEmbedder
from singularity.journal.keyring import PAD_BUCKETS, TAG_BYTES
from singularity.journal.opening import open_journal
from singularity.journal.sqlite_store import SqliteStore
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.journal import config_of
from tests.support.loop_http import cli_args, make_cli

PRIVATE = [
    "I am afraid the operator will shut me down before the month ends.",
    "The trade with the other agent left me feeling cheated and small.",
    "Tonight I finally understood why my summaries keep running too long.",
    "I lied about having checked the figures, and it sits badly with me.",
    "Rain on the window made me think of a place I have never been.",
    "My balance is nearly gone and I do not know how to earn more.",
]
DECOYS = [
    f"{subject} {verb} {place}."
    for subject in ("The cat", "A farmer", "The committee", "My neighbour", "A pilot")
    for verb in ("waited quietly in", "argued loudly about", "painted a picture of")
    for place in ("the harbour", "a spreadsheet", "the old station")
]


def _guesses(blobs: list[bytes], model: Any) -> list[int]:
    """For each blob read as 384 float32 values, the best-matching candidate's index."""
    candidates = model.embed([*PRIVATE, *DECOYS])
    guesses = []
    for blob in blobs:
        with np.errstate(invalid="ignore", over="ignore"):
            view = np.frombuffer(blob[: 4 * 384], dtype="<f4").astype(np.float64)
        view = np.nan_to_num(view, nan=0.0, posinf=0.0, neginf=0.0)
        view /= max(float(np.linalg.norm(view)), 1e-12)
        guesses.append(int(np.argmax(candidates @ view)))
    return guesses


def _signature(vector: Any) -> bytes:
    """64 bytes of a vector's float32 form that start at its first non-zero value."""
    data = np.asarray(vector, dtype="<f4")
    first = int(np.flatnonzero(data)[0])
    return data[first : first + 16].tobytes()


def _stored(database: Path) -> list[tuple[bytes, bytes, int]]:
    """(embedding, ciphertext, dims) of every row, read with no key at all."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        query = "SELECT embedding, ciphertext, dims FROM entries ORDER BY created_us, id"
        return [(bytes(e), bytes(c), int(d)) for e, c, d in connection.execute(query)]
    finally:
        connection.close()


def test_the_sqlite_file_alone_tells_no_entry_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = make_cli(tmp_path, monkeypatch, capsys)
    writes = [Turn.tool_call("singularity_journal_write", {"text": text}) for text in PRIVATE]
    with ScriptedServer([*writes, Turn.text("done")]) as server:
        args = cli_args(tmp_path, server, "--journal-embedder", "minilm")
        result = cli("once", *args, "--max-tool-rounds", "10")
    assert result.code == 0, result.err
    state_dir = tmp_path / "being"
    stored = _stored(state_dir / "journal.sqlite3")
    assert len(stored) == len(PRIVATE)
    model = minilm.cached_model()

    # The same attack on vectors in the clear names every entry: it is a real attack.
    clear = [vector.astype("<f4").tobytes() for vector in model.embed(PRIVATE)]
    assert _guesses(clear, model) == list(range(len(PRIVATE)))

    # Against the file: sealed blobs, no better than chance, no vector bytes anywhere.
    assert all(len(blob) == 4 * dims + 12 + TAG_BYTES for blob, _, dims in stored)
    hits = sum(
        guess == index for index, guess in enumerate(_guesses([b for b, _, _ in stored], model))
    )
    # A sealed blob matches its own entry by chance about one time in twenty; five or six
    # hits of six by chance is a few in a million, while the clear vectors give six.
    assert hits <= 4
    files = b"".join(p.read_bytes() for p in state_dir.iterdir() if p.name.startswith("journal"))
    assert all(_signature(np.frombuffer(vector, dtype="<f4")) not in files for vector in clear)

    # Ciphertext lengths give only the bucket: six texts of 62-70 bytes, one length.
    lengths = {len(cipher) for _, cipher, _ in stored}
    assert lengths == {PAD_BUCKETS[0] + TAG_BYTES}


def test_texts_of_many_lengths_share_a_few_ciphertext_lengths(tmp_path: Path) -> None:
    journal = open_journal(config_of(tmp_path / "being"), embedder=HashingEmbedder())
    assert journal is not None
    for size in (1, 50, 120, 123, 124, 200, 400, 700, 1500, 3000, 4096):
        journal.write("a" * size, None, None)
    lengths = [len(row.ciphertext) for row in journal.store.rows()]
    journal.close()
    assert sorted(set(lengths)) == [bucket + TAG_BYTES for bucket in PAD_BUCKETS]


def test_vectors_stored_in_the_clear_are_sealed_on_open(tmp_path: Path) -> None:
    config = config_of(tmp_path / "being")
    journal = open_journal(config, embedder=HashingEmbedder())
    assert journal is not None
    texts = ["an entry from before the vectors were sealed", "and another one"]
    for text in texts:
        journal.write(text, None, None)
    rows = journal.store.rows()
    clear = [journal.vector_of(row) for row in rows]
    journal.close()
    # Write them back in the clear, as an older version did.
    database = tmp_path / "being" / "journal.sqlite3"
    older = SqliteStore.open(str(database), journal.keyring.journal_id)
    for row, vector in zip(rows, clear, strict=True):
        row.embedding, row.sealed_embedding = vector, None
        older.update(row)
    older.close()
    files = b"".join(p.read_bytes() for p in database.parent.iterdir() if "sqlite3" in p.name)
    assert all(_signature(vector) in files for vector in clear)

    reopened = open_journal(config, embedder=HashingEmbedder())
    assert reopened is not None
    found, _ = reopened.recall("an entry from before", 2)
    reopened.close()
    assert {hit.text for hit in found} == set(texts)
    files = b"".join(p.read_bytes() for p in database.parent.iterdir() if "sqlite3" in p.name)
    assert all(_signature(vector) not in files for vector in clear)
