"""A skill server's stderr, kept in `<state-dir>/logs/` instead of the terminal (decision 25).

Each server writes to `<logs>/<name>.log` (0600, appended across restarts and boots);
past `MAX_LOG_BYTES` the file moves to `<name>.log.1`, replacing the previous one, so a
chatty server holds at most twice that on disk. The runtime reads the pipe itself,
which is what lets it cap the size, and a log it cannot write never stops the server.
"""

from __future__ import annotations

import logging
import os
from typing import Final

log = logging.getLogger(__name__)
MAX_LOG_BYTES: Final = 1024 * 1024
LOG_DIR_MODE: Final = 0o700
_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def server_log_path(log_dir: str, name: str) -> str:
    """Where the server called `name` (its surface, or `las`) keeps its stderr."""
    return os.path.join(log_dir, f"{name}.log")


def make_log_dir(log_dir: str) -> None:
    """Create the logs folder (0700) if it is missing; an existing one is left as it is."""
    try:
        os.mkdir(log_dir, LOG_DIR_MODE)
    except FileExistsError:
        pass


class StderrLog:
    """Appends what a server writes on stderr to its log file, rotating past the cap."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._size = 0
        self._broken = False
        self._open()

    def _open(self) -> None:
        try:
            self._fd = os.open(self.path, _FLAGS, 0o600)
            os.fchmod(self._fd, 0o600)
            self._size = os.fstat(self._fd).st_size
        except OSError as error:
            self._fail(error)

    def _fail(self, error: OSError) -> None:
        if not self._broken:
            log.warning("cannot write the skill server log %s: %s", self.path, error.strerror)
        self._broken = True
        self.close()

    def write(self, data: bytes) -> None:
        """Append a chunk; move the file aside first when it would pass the cap."""
        if self._fd is None:
            return
        if self._size and self._size + len(data) > MAX_LOG_BYTES:
            self.close()
            try:
                os.replace(self.path, self.path + ".1")
            except OSError as error:
                self._fail(error)
                return
            self._open()
            if self._fd is None:
                return
        try:
            self._size += os.write(self._fd, data)
        except OSError as error:
            self._fail(error)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
