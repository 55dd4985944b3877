"""The bytes a step just wrote to `state.redo`, found without reading its unused space.

The log's space is allocated ahead of its records, so its size says nothing of a step;
reading the whole zero tail after every step would also be work the bench adds to the
being's next sync (measured: it slows that fdatasync), so only the bytes past the last
known end are read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from singularity.store.redo import used_length

BLOCK = 1 << 16


@dataclass(frozen=True)
class LogEnd:
    """Where the records of one log end, and what the last step added there."""

    inode: int = -1
    end: int = 0
    record: bytes = b""

    def after_step(self, path: Path) -> LogEnd:
        """The end after a step: a new log (a checkpoint started it) is measured whole,
        and adds no record; otherwise the bytes from the last end up to the zeros."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            inode = os.fstat(fd).st_ino
            if inode != self.inode:
                return LogEnd(inode, used_length(fd))
            chunks: list[bytes] = []
            offset = self.end
            while True:
                block = os.pread(fd, BLOCK, offset)
                kept = block.rstrip(b"\0")
                chunks.append(kept)
                offset += len(kept)
                if len(kept) < len(block) or not block:
                    return LogEnd(inode, offset, b"".join(chunks))
        finally:
            os.close(fd)
