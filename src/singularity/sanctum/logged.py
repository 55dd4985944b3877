"""Appends to a sanctum folder that ride in the being's next durable step.

In a state directory the runtime's session notes cost no sync of their own: an append
goes into the redo record of the being's next step (`state.redo`, one fdatasync for
both), and is written to its file once that record is durable. The next checkpoint
syncs the file before it discards the record, and a boot after a crash writes back a
note the file lacks (`singularity.store.sanctum_appends`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class LoggedAppend:
    """Bytes that go at `offset` of a file of a sanctum folder (offset 0: a new file)."""

    root: str
    """The sanctum folder: absolute, or relative to the state directory that logs it."""
    path: str
    """The file beneath it, `/`-separated (`memory/sessions/2026-12-03-runtime.md`)."""
    offset: int
    data: bytes

    @property
    def parts(self) -> tuple[str, ...]:
        """The file's path components."""
        return tuple(self.path.split("/"))

    @property
    def end(self) -> int:
        """The file's length once the append is in it."""
        return self.offset + len(self.data)


class Steps(Protocol):
    """The being's durable steps, which take appends with them."""

    def ride(self, append: LoggedAppend) -> None:
        """Log `append` in the next step's record and write it once that is durable."""
        ...
