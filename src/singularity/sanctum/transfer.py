"""The sanctum in and out: an archive of it, and the mind's memories as raw material.

`export_sanctum` writes a tar archive to a new 0600 file (never over an existing one),
skipping our temp files; symlinks are archived as links and never followed. The mind's
memories (spec: quick short-term notes) become raw files to distil, 64 KiB at most each.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator, Sequence

from singularity.domain.records import MemoryEntry
from singularity.errors import StateError
from singularity.sanctum.descriptors import TEMP_PREFIX
from singularity.secrets import os_error_text
from singularity.storage import fsio

CHUNK_BYTES = 60 * 1024
"""Room for a raw file's frontmatter within the 64 KiB a sanctum file may hold."""


def export_sanctum(root: str, archive: str) -> int:
    """Archive the sanctum folder as `sanctum/…`; the number of files archived."""
    counted = 0

    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal counted
        if os.path.basename(member.name).startswith(TEMP_PREFIX):
            return None
        if member.isfile():
            counted += 1
        return member

    try:
        fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as error:
        raise StateError(f"cannot create {archive}: {os_error_text(error)}") from None
    try:
        with os.fdopen(fd, "wb") as handle, tarfile.open(fileobj=handle, mode="w") as tar:
            tar.add(root, arcname="sanctum", recursive=True, filter=keep)
            handle.flush()
            fsio.sync(handle.fileno(), "sanctum-export.fsync")
    except OSError as error:
        raise StateError(f"cannot export the sanctum: {os_error_text(error)}") from None
    return counted


def memory_lines(memories: Sequence[MemoryEntry]) -> Iterator[str]:
    """Each memory as one Markdown list item, oldest first."""
    for memory in memories:
        text = " ".join(memory.text.split())
        yield f"- {memory.created_at} [{memory.kind}] {text}\n"


def memory_chunks(memories: Sequence[MemoryEntry]) -> list[str]:
    """The memories as the contents of raw files, each under 60 KiB (one if there are none)."""
    header = "# Memories from the mind\n\nEach line: when, [kind], what was remembered.\n\n"
    chunks: list[str] = []
    current = header
    for line in memory_lines(memories):
        if len((current + line).encode("utf-8")) > CHUNK_BYTES and current != header:
            chunks.append(current)
            current = header
        current += line
    if current != header or not chunks:
        chunks.append(current if memories else header + "(no memories)\n")
    return chunks
