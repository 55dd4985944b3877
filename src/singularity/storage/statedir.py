"""The state directory: owner-only, single-writer, with a durably replaced `state.json`.

Opening creates the directory 0700 (fsyncing its parent), refuses one that is a
symlink or belongs to another user, and takes an exclusive advisory lock on
`<dir>/lock` (decision 11). Saves go through `fsio.replace_file` (decision 12).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
from dataclasses import dataclass, field

from singularity.domain.state import AgentState, parse_state
from singularity.errors import FatalIoError, StateError, StateLockedError
from singularity.secrets import os_error_text
from singularity.storage import fsio

STATE_FILE = "state.json"
LOCK_FILE = "lock"
STATE_TEMP_PREFIX = ".state-"
MAX_STATE_BYTES = 1 << 30
TEMP_PATTERN = re.compile(
    r"^\.(?:state|redo)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.tmp$"
)


def check_owned_directory(path: str, label: str = "state directory") -> None:
    """Refuse, naming it `label`, a path that is a symlink, not a directory, or not ours."""
    try:
        info = os.lstat(path)
    except OSError as error:
        raise StateError(f"cannot open {label} {path}: {os_error_text(error)}") from None
    if stat.S_ISLNK(info.st_mode):
        raise StateError(f"{label} must not be a symlink: {path}")
    if not stat.S_ISDIR(info.st_mode):
        raise StateError(f"{label} is not a directory: {path}")
    if info.st_uid != os.geteuid():
        raise StateError(f"{label} {path} is owned by another user")


def create_private_directory(path: str) -> None:
    """Create a 0700 directory (and missing parents) durably; an existing one is left alone."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        create_private_directory(parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    fsio.sync_dir_at(parent, "statedir")


@dataclass
class StateDir:
    """An open, locked state directory."""

    path: str
    fd: int
    lock_fd: int
    removed_temps: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, path: str, *, create: bool = True) -> StateDir:
        """Open (creating if allowed) and lock the state directory."""
        # A trailing slash would make lstat and O_NOFOLLOW follow a final symlink.
        fs_path = path.rstrip("/") or "/"
        if create and not os.path.lexists(fs_path):
            try:
                create_private_directory(fs_path)
            except OSError as error:
                raise StateError(
                    f"cannot create state directory {path}: {os_error_text(error)}"
                ) from None
        check_owned_directory(fs_path)
        try:
            fd = fsio.open_dir(fs_path)
        except OSError as error:
            raise StateError(
                f"cannot open state directory {path}: {os_error_text(error)}"
            ) from None
        try:
            # Checked again on the open descriptor: the path may have changed meanwhile.
            info = os.fstat(fd)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                raise StateError(f"state directory {path} is owned by another user")
            os.fchmod(fd, 0o700)
            lock_fd = _lock(fd, path)
        except BaseException:
            os.close(fd)
            raise
        return cls(path=path, fd=fd, lock_fd=lock_fd)

    def close(self) -> None:
        """Release the lock and close the directory."""
        os.close(self.lock_fd)
        os.close(self.fd)

    def __enter__(self) -> StateDir:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def file_path(self, name: str) -> str:
        """The path of a file in the directory, for messages."""
        return os.path.join(self.path, name)

    def has_state(self) -> bool:
        """Whether `state.json` exists."""
        try:
            os.stat(STATE_FILE, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def load(self) -> AgentState | None:
        """The saved being, or None when there is no `state.json`."""
        try:
            data = fsio.read_at(self.fd, STATE_FILE, MAX_STATE_BYTES)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise StateError("state.json must be a regular file, not a symlink") from None
            raise FatalIoError(f"cannot read state.json: {os_error_text(error)}") from None
        return parse_state(data)

    def save(self, state: AgentState) -> None:
        """Durably replace `state.json`; any failure is fatal and leaves the old file intact."""
        self.write_state_bytes(state.to_json())

    def write_state_bytes(self, data: bytes) -> None:
        """Durably replace `state.json` with exactly these bytes."""
        try:
            fsio.replace_file(
                self.fd, STATE_FILE, data, temp_prefix=STATE_TEMP_PREFIX, point="state"
            )
        except OSError as error:
            raise FatalIoError(f"cannot save state.json: {os_error_text(error)}") from None

    def stale_temps(self) -> list[str]:
        """Leftover temp files of our own naming that are regular files we own."""
        found = []
        for name in os.listdir(self.fd):
            if not TEMP_PATTERN.fullmatch(name):
                continue
            info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                found.append(name)
        return found

    def remove_stale_temps(self) -> list[str]:
        """Remove leftover temp files of our own naming (decision 14); nothing else."""
        removed = self.stale_temps()
        for name in removed:
            os.unlink(name, dir_fd=self.fd)
        if removed:
            fsio.fsync_dir(self.fd, "statedir")
        self.removed_temps = removed
        return removed


def _lock(dir_fd: int, path: str) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        lock_fd = os.open(LOCK_FILE, flags, 0o600, dir_fd=dir_fd)
    except OSError as error:
        raise StateError(f"cannot open lock file in {path}: {os_error_text(error)}") from None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise StateLockedError(f"another runtime owns {path}") from None
    return lock_fd
