"""Evaluated prompts kept on disk, so that a restarted gateway need not evaluate them again.

llama.cpp writes its context (the evaluated tokens and their KV cache) to a file and reads
it back in a fraction of a second, where evaluating a being's ~1,700-token first prompt
costs minutes of CPU on 2 cores. After a request that evaluated many new tokens the
gateway saves its context; before a request that shares little with the context in
memory, it loads the saved one sharing the longest prefix with the prompt, and llama.cpp
evaluates only the rest. A resumed being, or another being with the same tools, so starts
warm after `brama serve` restarts.

Each saved context is a llama.cpp session file and a small JSON record beside it (its
tokens, size and sha256), written after the session file is in place: a file whose record
is missing or does not match is never loaded, and is removed. The newest `KEEP` contexts
are kept per model file, context size and llama.cpp version, in an owner-only directory.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

KEEP: Final = 3
# A context is saved when a request evaluated at least this many new tokens, and loaded
# when it shares at least this many more with the prompt than the context in memory.
SAVE_MIN: Final = 128
LOAD_MIN: Final = 64
RECORD: Final = ".json"
SESSION: Final = ".session"


def default_prompt_dir() -> Path:
    """Where evaluated prompts are kept, once per machine and user."""
    return Path.home() / ".cache" / "singularity" / "prompts"


def shared(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the common prefix of two token lists."""
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class PromptStore:
    """The saved contexts of one model file (`key`), in `directory/key`."""

    def __init__(self, cpp: Any, directory: Path, key: str) -> None:
        self._cpp = cpp
        self.directory = directory / key
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.directory, 0o700)

    def _records(self) -> list[tuple[Path, dict[str, Any]]]:
        """(record path, record) of every saved context, newest first."""
        found = []
        for path in self.directory.glob("*" + RECORD):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                found.append((path.stat().st_mtime_ns, path, record))
            except (OSError, ValueError):
                continue
        found.sort(key=lambda item: item[0], reverse=True)
        return [(path, record) for _, path, record in found if isinstance(record, dict)]

    def _drop(self, record: Path) -> None:
        for path in (record, record.with_suffix(SESSION)):
            path.unlink(missing_ok=True)

    def restore(self, llama: Any, tokens: Sequence[int]) -> int:
        """Load the saved context sharing most with `tokens`, if it beats memory's; its length."""
        in_memory = shared(llama.input_ids[: llama.n_tokens], tokens)
        best: tuple[int, Path, dict[str, Any]] | None = None
        for path, record in self._records():
            common = shared(record.get("tokens") or [], tokens)
            if common >= in_memory + LOAD_MIN and (best is None or common > best[0]):
                best = (common, path, record)
        if best is None:
            return 0
        _, path, record = best
        session = path.with_suffix(SESSION)
        try:
            intact = _sha256(session) == record.get("sha256")
        except OSError:
            intact = False
        count = ctypes.c_size_t(0)
        capacity = llama.n_ctx()
        out = (self._cpp.llama_token * capacity)()
        if not intact or not self._cpp.llama_state_load_file(
            llama._ctx.ctx, str(session).encode(), out, capacity, ctypes.byref(count)
        ):
            log.warning("a saved prompt context was unreadable and is removed: %s", session.name)
            self._drop(path)
            llama.reset()
            return 0
        llama.input_ids[: count.value] = list(out[: count.value])
        llama.n_tokens = count.value
        llama._requires_eval = True  # its logits are not restored: never sample from them
        os.utime(path)
        return int(count.value)

    def save(self, llama: Any) -> None:
        """Save the context in memory, and keep only the newest `KEEP`."""
        n = int(llama.n_tokens)
        tokens = [int(t) for t in llama.input_ids[:n]]
        name = hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:32]
        record = self.directory / (name + RECORD)
        temporary = self.directory / f".{uuid.uuid4().hex}.tmp"
        try:
            array = (self._cpp.llama_token * n)(*tokens)
            if not self._cpp.llama_state_save_file(
                llama._ctx.ctx, str(temporary).encode(), array, n
            ):
                raise OSError("llama.cpp could not write the session file")
            os.chmod(temporary, 0o600)
            session = record.with_suffix(SESSION)
            os.replace(temporary, session)
            document = {"tokens": tokens, "bytes": session.stat().st_size}
            document["sha256"] = _sha256(session)
            written = temporary.with_suffix(".json.tmp")
            written.write_text(json.dumps(document), encoding="utf-8")
            os.chmod(written, 0o600)
            os.replace(written, record)
        except OSError as error:
            log.warning("the prompt context could not be saved: %s", error)
            temporary.unlink(missing_ok=True)
            return
        for old, _ in self._records()[KEEP:]:
            self._drop(old)
        for orphan in self.directory.glob("*" + SESSION):  # left by a save cut short
            if not orphan.with_suffix(RECORD).exists():
                orphan.unlink(missing_ok=True)
