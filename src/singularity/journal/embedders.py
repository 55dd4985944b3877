"""Embedders: the local sentence model where it is installed, else hashing.

Every vector is float32 and L2-normalised, so cosine similarity is a dot product. The
model name is stored with each row; vectors of different models are never compared.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from singularity.errors import ConfigurationError
from singularity.journal import minilm
from singularity.journal.records import EMBEDDER_CHOICES, Vector

HASHING = "hashing-v1"
HASHING_DIMENSIONS = 768
_WORD = re.compile(r"\w+")


class Embedder(Protocol):
    """Turns texts into unit vectors of a fixed dimension."""

    @property
    def name(self) -> str:
        """The model name stored with each vector."""
        ...

    @property
    def dimensions(self) -> int:
        """The length of each vector."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One unit row per text, float32, shape (len(texts), dimensions)."""
        ...


def normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)


class HashingEmbedder:
    """Signed feature hashing of words, word pairs and character trigrams; works everywhere."""

    name = HASHING
    dimensions = HASHING_DIMENSIONS

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Hash each text's features into a unit vector."""
        matrix = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature, weight in _features(text):
                digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                sign = 1.0 if value >> 63 else -1.0
                matrix[row, value % self.dimensions] += sign * weight
        return normalise(matrix)


def _features(text: str) -> list[tuple[str, float]]:
    words = _WORD.findall(text.lower())
    found = [("w:" + word, 1.0) for word in words]
    found += [(f"b:{a} {b}", 0.7) for a, b in itertools.pairwise(words)]
    for word in words:
        padded = f"<{word}>"
        found += [("c:" + padded[i : i + 3], 0.3) for i in range(len(padded) - 2)]
    return found


def fallback_warning(choice: str) -> str | None:
    """The warning to give when `auto` falls back to hashing; None when the model is used."""
    lacking = minilm.missing()
    if choice != "auto" or lacking is None:
        return None
    return (
        f"the journal's embedding model ({minilm.NAME}) cannot run because {lacking} is not "
        "installed, so the journal uses the hashing fallback: recall matches words, not "
        "meaning, and its vectors reveal which words an entry holds (see docs/concepts.md); "
        f"install it with `pip install {lacking}`"
    )


def check_embedder(choice: str) -> str | None:
    """Check the configured embedder as a being would use it: None when it is ready, the
    fallback warning when `auto` hashes; raises when `minilm` is missing or the model file
    is not the pinned one."""
    embedder = make_embedder(choice)
    if isinstance(embedder, LazyModel) and not minilm.cached_model.cache_info().currsize:
        minilm.verified_bytes()  # the file is hashed, not loaded: boot stays fast
    return fallback_warning(choice)


def make_embedder(choice: str) -> Embedder:
    """The configured embedder: `auto` takes the local model when installed."""
    if choice not in EMBEDDER_CHOICES:
        raise ConfigurationError(
            f"journal embedder must be one of {', '.join(EMBEDDER_CHOICES)}: {choice}"
        )
    if choice == "hashing":
        return HashingEmbedder()
    lacking = minilm.missing()
    if lacking is None:
        return LazyModel()
    if choice == "minilm":
        raise ConfigurationError(
            f"journal embedder minilm needs {lacking}, which is not installed (nothing is "
            "downloaded at run time)"
        )
    return HashingEmbedder()


class LazyModel:
    """The local model, verified and loaded on the first text it embeds (boot stays fast)."""

    name = minilm.NAME
    dimensions = minilm.DIMENSIONS

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed with the shared, loaded model."""
        return minilm.cached_model().embed(texts)


def as_vector(row: np.ndarray) -> Vector:
    """One row of an embedding matrix as a contiguous float32 vector."""
    return np.ascontiguousarray(row, dtype=np.float32)
