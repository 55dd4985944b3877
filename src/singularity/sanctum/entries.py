"""A sanctum as a list of entries, to move it between stores: read from a folder, written out.

An entry is a folder (`memory/topics/`, no content) or a regular file (`PERSONA.md`, its
bytes), named by its path from the sanctum's root. Our temp files are left out; anything
else in the sanctum (a symlink, a device) is refused, since no store but a folder could
keep it. The PostgreSQL store keeps the same entries as versioned rows
(`singularity.store.postgres.sanctum`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from singularity.errors import StateError
from singularity.sanctum.descriptors import TEMP_PREFIX
from singularity.sanctum.names import SanctumRefusal
from singularity.sanctum.store import SanctumStore
from singularity.storage import fsio, publish
from singularity.tools.confinement import InvalidPath, parse_path

MAX_FILE_BYTES = 64 << 20
"""The largest sanctum file moved (the being's own writes hold at most 64 KiB)."""
POINT = "sanctum-export"


@dataclass(frozen=True)
class SanctumEntry:
    """A folder (`content` None, `path` ending in `/`) or a file of the sanctum."""

    path: str
    content: bytes | None = None

    @property
    def is_folder(self) -> bool:
        """Whether the entry is a folder."""
        return self.content is None

    def parts(self) -> tuple[str, ...]:
        """The path's names; StateError when it would leave the sanctum or is malformed."""
        try:
            return parse_path(self.path)
        except InvalidPath:
            raise StateError(f"sanctum entry {self.path!r} is not a path within it") from None


def read_folder(root: str) -> list[SanctumEntry] | None:
    """Every folder and file of the sanctum at `root`, parents first; None when there is none."""
    if not os.path.lexists(root):
        return None
    try:
        store = SanctumStore(root)
    except OSError as error:
        raise StateError(f"cannot open sanctum {root}: {error}") from None
    found: list[SanctumEntry] = []
    try:
        _read_into(store, (), found)
    except SanctumRefusal as refusal:
        raise StateError(f"cannot read sanctum {root}: {refusal.message}") from None
    finally:
        store.close()
    return found


def _read_into(store: SanctumStore, parts: tuple[str, ...], found: list[SanctumEntry]) -> None:
    for entry in sorted(store.entries(parts), key=lambda entry: entry.name):
        if entry.name.startswith(TEMP_PREFIX):
            continue
        path = "/".join((*parts, entry.name))
        _check_name(store.root, path)
        if entry.kind == "dir":
            found.append(SanctumEntry(f"{path}/"))
            _read_into(store, (*parts, entry.name), found)
        elif entry.kind == "file":
            found.append(SanctumEntry(path, store.read_bytes((*parts, entry.name), MAX_FILE_BYTES)))
        else:
            raise StateError(
                f"sanctum {store.root}: {path} is neither a regular file nor a folder "
                "(a symlink?): move or remove it first"
            )


def _check_name(root: str, path: str) -> None:
    try:
        os.fsencode(path).decode("utf-8")
        parse_path(path)
    except (UnicodeDecodeError, InvalidPath):
        raise StateError(f"sanctum {root}: {path!r} is not a name a store can keep") from None


def write_folder(dir_fd: int, entries: Sequence[SanctumEntry]) -> None:
    """Write the entries into the empty folder `dir_fd` (a new tree), every one synced.

    A file's missing parent folders are made; a path that would leave the folder refuses.
    """
    folders: dict[tuple[str, ...], int] = {(): dir_fd}
    try:
        for entry in entries:
            parts = entry.parts()
            folder = _folder(folders, parts if entry.is_folder else parts[:-1])
            if entry.content is not None:
                publish.write_new_file(folder, parts[-1], entry.content, POINT)
        for fd in folders.values():
            fsio.fsync_dir(fd, POINT)
    finally:
        for parts, fd in folders.items():
            if parts:
                os.close(fd)


def _folder(folders: dict[tuple[str, ...], int], parts: tuple[str, ...]) -> int:
    for depth in range(1, len(parts) + 1):
        if parts[:depth] not in folders:
            parent = folders[parts[: depth - 1]]
            folders[parts[:depth]] = publish.make_folder(parent, parts[depth - 1])
    return folders[parts]


def export_folder(entries: Sequence[SanctumEntry], destination: str) -> int:
    """Write the entries out as a new folder `destination`, whole or not at all; the files."""
    publish.publish_directory(
        destination, lambda fd: write_folder(fd, entries), what="a sanctum", point=POINT
    )
    return sum(1 for entry in entries if not entry.is_folder)
