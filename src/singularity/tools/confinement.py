"""The one confinement primitive of the workspace file tools (spec §11.7-11.8).

A model-supplied path is first checked by a pure grammar (`parse_path`), then resolved
beneath the workspace root descriptor and handed back as an open descriptor, never as
a checked path string: validation and use are the same descriptor, so there is no
check-then-open window. Resolution uses Linux `openat2(RESOLVE_BENEATH |
RESOLVE_NO_MAGICLINKS)` where the kernel has it, and otherwise a walk of one component
at a time over `O_NOFOLLOW` descriptors that reads each symlink and resolves its target
against the directories already passed (a `..` must land on the very directory we came
through). Symlinks that stay inside the workspace are followed; an absolute symlink
target, or `..` above the root, leaves it (`WorkspaceEscape`), as with RESOLVE_BENEATH.

An entry swapped concurrently between a symlink and a directory or file is resolved
as one of its states, like the kernel does: the walk never retries and never answers
an I/O error for the swap (see `_open_step`). Only without `/proc` can a final file
swapped at that instant answer `EAGAIN`.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import stat
import sys
import unicodedata
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from singularity.errors import ConfigurationError
from singularity.secrets import os_error_text
from singularity.storage import fsio

MAX_COMPONENT_BYTES = 255
MAX_LINKS = 40
PATH_MESSAGE = "path must contain only relative normal components"
# The Unicode Bidi_Control characters: they make a name display as something else.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
TEMP_PATTERN = re.compile(r"\.singularity-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\.tmp")

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOCTTY: a tty never becomes ours.
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
DIR_MODE = 0o700

SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
RESOLVE_FLAGS = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
# The kernel refuses longer paths (PATH_MAX counts the NUL); the walk has no such limit.
OPENAT2_MAX_PATH = 4095
OPENAT2_RETRIES = 16
# The entry itself, whatever it is (a symlink included): never read through, only asked.
PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
PROC_FDS = "/proc/self/fd"


class InvalidPath(ValueError):
    """The path breaks the grammar; the tools report `invalid_path`."""

    def __init__(self) -> None:
        super().__init__(PATH_MESSAGE)


class WorkspaceEscape(Exception):
    """Resolution would leave the workspace; the tools report `workspace_boundary`."""


def _bad_component(name: str) -> bool:
    if "\\" in name or ":" in name:
        return True
    if any(char in BIDI_CONTROLS or unicodedata.category(char) == "Cc" for char in name):
        return True
    try:
        return len(name.encode("utf-8")) > MAX_COMPONENT_BYTES
    except UnicodeEncodeError:
        return True


def parse_path(text: str) -> tuple[str, ...]:
    """The normal components of a relative path, or `InvalidPath`; makes no system call."""
    if not text or text.startswith("/"):
        raise InvalidPath()
    pieces = text.split("/")
    if pieces[0] == ".":
        raise InvalidPath()
    parts = tuple(piece for piece in pieces if piece not in ("", "."))
    if not parts or any(part == ".." or _bad_component(part) for part in parts):
        raise InvalidPath()
    return parts


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


def _load_syscall() -> Callable[..., Any] | None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    function.argtypes = (
        ctypes.c_long,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
    )
    result: Callable[..., Any] = function
    return result


_syscall = _load_syscall()


def openat2(dir_fd: int, path: str, flags: int, resolve: int) -> int:
    """Call `openat2(2)`; raises `OSError` (ENOSYS where it cannot be called)."""
    if _syscall is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    how = _OpenHow(flags, 0, resolve)
    fd = int(
        _syscall(SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return fd


def openat2_available(dir_fd: int) -> bool:
    """Whether `openat2` works here (kernel ≥ 5.6 and not filtered by seccomp)."""
    try:
        os.close(openat2(dir_fd, ".", DIR_FLAGS, RESOLVE_FLAGS))
    except OSError:
        return False
    return True


def _open_step(dir_fd: int, name: str, last: bool) -> int | str:
    """Open one component without following it: its descriptor, or its symlink's target.

    The entry may be swapped between a symlink and something else at any moment. When
    the plain open finds a symlink, the entry is grabbed itself (`O_PATH | O_NOFOLLOW`)
    and everything after that is asked of that one inode, so each step answers for one
    state of the entry and never gives up: a symlink is read through its descriptor; a
    directory is reopened as `.` beneath itself; the final file is reopened through
    `/proc/self/fd`, the same inode again.
    """
    flags = READ_FLAGS | os.O_NOFOLLOW if last else DIR_FLAGS
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as error:
        # O_NOFOLLOW reports a symlink as ELOOP, or as ENOTDIR together with O_DIRECTORY.
        if error.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
    entry = os.open(name, PATH_FLAGS, dir_fd=dir_fd)
    try:
        mode = os.fstat(entry).st_mode
        if stat.S_ISLNK(mode):
            return os.readlink("", dir_fd=entry)
        if stat.S_ISDIR(mode):
            return os.open(".", flags & ~os.O_NOFOLLOW, dir_fd=entry)
        if not last:
            # A file where a directory is needed, as the kernel would say.
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        return _reopen(entry)
    finally:
        os.close(entry)


def _reopen(entry: int) -> int:
    """A readable descriptor of the very inode `entry` (an `O_PATH` descriptor) names."""
    try:
        return os.open(f"{PROC_FDS}/{entry}", READ_FLAGS)
    except FileNotFoundError:
        # No /proc here: the entry changed under us and cannot be reopened safely.
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN)) from None


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _replace_fd(old: int, new: int) -> int:
    os.close(old)
    return new


class Workspace:
    """The canonical workspace root, held open; every file tool resolves through it.

    `root` is the canonical path (for messages only; nothing is opened by path after
    boot) and `uses_openat2` tells which resolver is in use.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        use_openat2: bool | None = None,
        point: str = "workspace",
    ) -> None:
        """Canonicalize and open the root; `use_openat2=False` forces the component walk.

        `point` names the `fsio` failpoints of the directories it creates.
        """
        self.point = point
        self._root_fd = -1
        try:
            self.root = os.path.realpath(root, strict=True)
            self._root_fd = os.open(self.root, DIR_FLAGS)
        except NotADirectoryError:
            raise ConfigurationError("workspace must be a directory") from None
        except OSError as error:
            raise ConfigurationError(f"workspace: {os_error_text(error)}") from None
        available = openat2_available(self._root_fd)
        if use_openat2 and not available:
            self.close()
            raise ConfigurationError("openat2 is not available on this kernel")
        self.uses_openat2 = available if use_openat2 is None else use_openat2

    def close(self) -> None:
        """Close the root descriptor."""
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def open_file(self, parts: Sequence[str]) -> int:
        """Open `parts` read-only and without blocking; symlinks inside are followed."""
        if self._fits_openat2(parts):
            return self._openat2("/".join(parts), READ_FLAGS)
        return self._walk(parts, final=True, create=False)

    def open_dir(self, parts: Sequence[str], *, create: bool = False) -> int:
        """Open the directory `parts` (the root when empty), creating missing ones if asked.

        A directory is only ever created by `mkdirat` relative to a descriptor already
        proven to be inside, so nothing is created before the boundary is checked.
        """
        if not parts:
            return os.dup(self._root_fd)
        if self._fits_openat2(parts):
            try:
                return self._openat2("/".join(parts), DIR_FLAGS & ~os.O_NOFOLLOW)
            except FileNotFoundError:
                if not create:
                    raise
            # Creating goes one component at a time; the walk is just as confined.
        return self._walk(parts, final=False, create=create)

    def _fits_openat2(self, parts: Sequence[str]) -> bool:
        return self.uses_openat2 and len(os.fsencode("/".join(parts))) <= OPENAT2_MAX_PATH

    def _openat2(self, path: str, flags: int) -> int:
        for _ in range(OPENAT2_RETRIES):
            try:
                return openat2(self._root_fd, path, flags, RESOLVE_FLAGS)
            except OSError as error:
                if error.errno == errno.EXDEV:
                    raise WorkspaceEscape() from None
                # EAGAIN: a concurrent rename raced a `..` lookup and the kernel asks again.
                if error.errno != errno.EAGAIN:
                    raise
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))

    def _walk(self, parts: Sequence[str], *, final: bool, create: bool) -> int:
        """Resolve one component at a time; `final` opens the last one as a file to read.

        Only the current directory is held open; each level's identity is remembered so
        that `..` (from a symlink target) returns to exactly the directory we came through.
        """
        fd = os.dup(self._root_fd)
        levels = [_identity(fd)]
        # (name, may be created): components named by a symlink's target are never created.
        pending = [(part, create) for part in reversed(parts)]
        links = 0
        try:
            while pending:
                name, creatable = pending.pop()
                if name in ("", "."):
                    continue
                if name == "..":
                    if len(levels) == 1:
                        raise WorkspaceEscape()
                    fd = _replace_fd(fd, os.open("..", DIR_FLAGS, dir_fd=fd))
                    levels.pop()
                    if _identity(fd) != levels[-1]:
                        # The directory was moved meanwhile; the kernel answers EAGAIN too.
                        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
                    continue
                last = final and not pending
                try:
                    opened = _open_step(fd, name, last)
                except FileNotFoundError:
                    if not creatable or last:
                        raise
                    fsio.make_dir(fd, name, DIR_MODE, self.point)
                    pending.append((name, False))
                    continue
                if isinstance(opened, int):
                    if last:
                        return opened
                    fd = _replace_fd(fd, opened)
                    levels.append(_identity(fd))
                    continue
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                if opened.startswith("/"):
                    raise WorkspaceEscape()
                pending.extend((piece, False) for piece in reversed(opened.split("/")))
            result, fd = fd, -1
            return result
        finally:
            if fd >= 0:
                os.close(fd)

    def remove_stale_temps(self) -> int:
        """Remove our own leftover `.singularity-<uuid>.tmp` regular files (at boot); the count.

        Symlinks, directories and files of another owner with a matching name are left alone.
        """
        removed = 0
        for _, _, names, dir_fd in os.fwalk(".", dir_fd=self._root_fd, follow_symlinks=False):
            for name in names:
                if not TEMP_PATTERN.fullmatch(name):
                    continue
                try:
                    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                        os.unlink(name, dir_fd=dir_fd)
                        removed += 1
                except OSError:
                    continue
        return removed


def check_disjoint(
    workspace_root: str | os.PathLike[str], state_dir: str | os.PathLike[str]
) -> None:
    """Raise `ConfigurationError` when the workspace and the state directory contain each other."""
    workspace = os.path.realpath(workspace_root)
    state = os.path.realpath(state_dir)
    if os.path.commonpath([workspace, state]) in (workspace, state):
        raise ConfigurationError(
            f"workspace and state directory must not contain each other: {workspace} / {state}"
        )
