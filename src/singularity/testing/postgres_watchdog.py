"""Stops a server whose owner is gone, so that a server never outlives its process.

    python -m singularity.testing.postgres_watchdog REMOVE STOP_COMMAND...

`singularity.testing.postgres` runs this beside each server it starts, with a pipe on its
standard input whose only writer is the owner (a child it forks closes its copy). However
the owner ends (SIGKILL and a CI timeout too), the pipe closes; then this runs the
server's stop command and removes the folder REMOVE (none if empty), as `Server.stop`
does. It runs in a session of its own, so that a signal to the owner's process group
(Ctrl-C, a runner killing the group) does not take it down first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

_WATCHING: list[subprocess.Popen[bytes]] = []
"""This process's watchdogs, whose pipes a forked child must not hold."""


def _forget_in_child() -> None:
    # A child forked without exec would hold the owner's end and keep the server alive
    # after the owner is killed; descriptors marked close-on-exec are inherited by fork.
    for watchdog in _WATCHING:
        if watchdog.stdin is not None:
            watchdog.stdin.close()
    _WATCHING.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def spawn(stop: Sequence[str], remove: str | None) -> subprocess.Popen[bytes]:
    """Start a watchdog; closing its `stdin` (or the owner's ending) releases it."""
    watchdog = subprocess.Popen(
        [sys.executable, "-m", __name__, remove or "", *stop],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _WATCHING.append(watchdog)
    return watchdog


def release(watchdog: subprocess.Popen[bytes]) -> None:
    """Close the owner's end and wait while the watchdog stops what is left of the server."""
    if watchdog in _WATCHING:
        _WATCHING.remove(watchdog)
    if watchdog.stdin is not None:
        watchdog.stdin.close()
    watchdog.wait()


def main(remove: str, stop: Sequence[str]) -> None:
    """Wait for the owner's end of standard input to close, then stop and remove."""
    while sys.stdin.buffer.read(4096):
        pass
    subprocess.run(stop, capture_output=True, check=False)
    if remove:
        shutil.rmtree(remove, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
