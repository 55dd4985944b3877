"""Helpers for the journal tests: a saved being to own a journal, its journal config, and
a changed model file in place of the installed one."""

from __future__ import annotations

from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.journal import minilm
from singularity.journal.extension import fingerprint_of
from singularity.journal.service import JournalConfig
from singularity.runtime.being import open_being
from singularity.store.directory import peek_state


def new_being(state_dir: Path, **flags: str) -> str:
    """A saved being at `state_dir` (its workspace beside it); its journal fingerprint."""
    workspace = state_dir.parent / f"{state_dir.name}-ws"
    workspace.mkdir(exist_ok=True)
    settings = resolve(
        {"state_dir": str(state_dir), "workspace": str(workspace), **flags}, environ={}
    )
    being = open_being(settings)
    try:
        being.save()
        return fingerprint_of(being.state)
    finally:
        being.close()


def config_of(state_dir: Path, **options: object) -> JournalConfig:
    """The journal config of the being saved at `state_dir` (made first when there is none)."""
    state = peek_state(str(state_dir))
    being = fingerprint_of(state) if state is not None else new_being(state_dir)
    return JournalConfig(str(state_dir), being, **options)  # type: ignore[arg-type]


def change_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the model file with one byte changed, found in place of the installed one."""
    original = minilm.model_path()
    assert original is not None
    data = bytearray(Path(original).read_bytes())
    data[len(data) // 2] ^= 0x01
    copy = tmp_path / "changed" / "model.onnx"
    copy.parent.mkdir()
    copy.write_bytes(bytes(data))
    monkeypatch.setattr(minilm, "model_path", lambda: str(copy))
    return copy
