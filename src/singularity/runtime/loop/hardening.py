"""Process hardening: keep other same-user processes (children included) out of our memory."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

PR_SET_DUMPABLE = 4


def make_non_dumpable() -> bool:
    """Forbid ptrace and `/proc/<pid>/environ` reads by same-uid processes (Linux); True if set."""
    if not sys.platform.startswith("linux"):
        return False
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
