"""The sanctum appends a state directory's `state.redo` carries (the runtime's session notes).

An append rides in the record of the being's next step (`DirectoryStore.ride`): the
record's one fdatasync makes it durable, then its bytes are written to the sanctum file
without a sync of their own. Until the next checkpoint the log is what makes them
durable, so a checkpoint writes back whatever of them a file lacks, syncs every file
they went into (and the folder of a file they made) and only then discards the log. A
boot replays the same way: whatever a crash cut short is written once, never twice.

The log names a sanctum folder inside the state directory by its path from there, so a
state directory moved whole still finds its sanctum.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace

from singularity.errors import FatalIoError, SingularityError
from singularity.sanctum.logged import LoggedAppend
from singularity.sanctum.names import SanctumRefusal
from singularity.sanctum.riding import holds_logged, read_logged, sync_logged, write_logged
from singularity.sanctum.store import SanctumStore
from singularity.secrets import os_error_text

log = logging.getLogger(__name__)


class SanctumAppends:
    """The appends of one state directory's log since its checkpoint, and their writes."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = os.path.abspath(state_dir)
        self.riding: list[LoggedAppend] = []
        """Appends for the next step's record."""
        self.logged: list[LoggedAppend] = []
        """Appends the log holds: written, or to be written back, before it is discarded."""
        self._open: dict[str, SanctumStore] = {}

    def ride(self, append: LoggedAppend) -> None:
        """Take an append for the next step, its folder named as the log names it."""
        root = os.path.abspath(append.root)
        if os.path.commonpath([root, self.state_dir]) == self.state_dir:
            root = os.path.relpath(root, self.state_dir)
        self.riding.append(replace(append, root=root))

    def take(self) -> list[LoggedAppend]:
        """The appends of the step being logged; logged from now on."""
        taken, self.riding = self.riding, []
        self.logged += taken
        return taken

    def write(self, appends: Iterable[LoggedAppend]) -> None:
        """Write appends the log holds (what a file holds already is left as it is).

        A file that cannot take one is a warning: the log still holds it, and the next
        checkpoint or boot tries again before the log is discarded.
        """
        for append in appends:
            try:
                write_logged(self._sanctum(append.root), append)
            except (SanctumRefusal, SingularityError, OSError) as error:
                log.warning("cannot write the logged append to %s: %s", append.path, error)

    def settle(self) -> None:
        """Before a checkpoint discards the log: write back what a file lacks, then sync
        every file the logged appends went into (the folder of each file they made)."""
        self.write([*self.logged, *self.take()])
        made = {(a.root, a.path) for a in self.logged if a.offset == 0}
        for root, path in dict.fromkeys((a.root, a.path) for a in self.logged):
            try:
                sync_logged(self._sanctum(root), path.split("/"), entry=(root, path) in made)
            except (SanctumRefusal, SingularityError) as error:
                log.warning("cannot sync %s: %s", path, error)
            except OSError as error:
                raise FatalIoError(f"cannot sync {path}: {os_error_text(error)}") from None
        self.logged = []

    def _sanctum(self, root: str) -> SanctumStore:
        sanctum = self._open.get(root)
        if sanctum is None:
            sanctum = SanctumStore(os.path.join(self.state_dir, root))
            self._open[root] = sanctum
        return sanctum

    def close(self) -> None:
        """Close the sanctum folders opened."""
        for sanctum in self._open.values():
            sanctum.close()
        self._open.clear()


def check_appends(state_dir: str, appends: Sequence[LoggedAppend]) -> tuple[list[str], list[str]]:
    """What `verify` finds of the log's appends in their files: problems (a file holding
    other bytes where an append goes), and what a boot writes back (read only)."""
    problems: list[str] = []
    settling: list[str] = []
    folders: dict[str, SanctumStore] = {}
    files: dict[tuple[str, str], bytes | None] = {}
    """Each file as the appends before this one leave it once written back."""
    try:
        for append in appends:
            root = os.path.join(os.path.abspath(state_dir), append.root)
            key = (root, append.path)
            try:
                if key not in files:
                    sanctum = folders.get(root) or folders.setdefault(root, SanctumStore(root))
                    files[key] = read_logged(sanctum, append)
            except (SingularityError, OSError) as error:
                problems.append(f"cannot read {append.path} of {root}: {error}")
                continue
            held = holds_logged(files[key], append)
            if held is None:
                problems.append(f"{append.path} differs from the append state.redo logged")
            elif not held:
                files[key] = (files[key] or b"")[: append.offset] + append.data
                settling.append(
                    f"{append.path} lacks an append state.redo logged (the next boot writes it)"
                )
    finally:
        for sanctum in folders.values():
            sanctum.close()
    return problems, settling
