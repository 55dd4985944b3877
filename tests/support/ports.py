"""Loopback ports for the servers tests start as children, and ports nothing answers on.

A port probed free and handed to a child can be taken by another program before the
child binds it. `serve_on_free_port` closes that race the way the Temporal dev server's
start does (`singularity.fleet.dev`): the child is up only once the socket listening on
its port is its own, and a child that exits first (it lost the port) is started again
on another port.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from singularity.fleet.dev import free_port, listens
from tests.support.polling import wait_for

START_ATTEMPTS = 5
LOG_TAIL_CHARS = 3000

_REFUSING: list[socket.socket] = []
"""Sockets bound and never listening, held so that nothing else can take their ports."""


def closed_port_url() -> str:
    """The URL of a gateway that is down: connections to it are refused.

    The port stays bound (never listening) for the rest of the session, so no other
    program can start answering there.
    """
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    _REFUSING.append(held)
    return f"http://127.0.0.1:{held.getsockname()[1]}/"


def serve_on_free_port(
    launch: Callable[[int], subprocess.Popen[bytes]],
    what: str,
    *,
    timeout: float = 180.0,
    log: Path | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """Start `launch(port)` on free ports until the child listens on its port itself.

    Returns the running child and its port. A child that exits before it listens is
    started again on another port, up to `START_ATTEMPTS` times; a child that neither
    listens nor exits within `timeout` seconds is killed. The failure names `what` and
    ends with the tail of `log`, if given.
    """
    for _ in range(START_ATTEMPTS):
        process, port = _start(launch, what, timeout)
        if process.poll() is None:
            return process, port
    tail = log.read_text(errors="replace")[-LOG_TAIL_CHARS:] if log is not None else ""
    raise AssertionError(
        f"{what} exited with {process.returncode} before it listened, on each of "
        f"{START_ATTEMPTS} free ports\n{tail}"
    )


def _start(
    launch: Callable[[int], subprocess.Popen[bytes]], what: str, timeout: float
) -> tuple[subprocess.Popen[bytes], int]:
    """One start on a free port: the child once it listens there, or once it has exited."""
    port = free_port()
    process = launch(port)
    try:
        wait_for(
            lambda: process.poll() is not None or listens(process.pid, port),
            f"{what} to listen on port {port}",
            timeout=timeout,
        )
    finally:
        if process.poll() is None and not listens(process.pid, port):
            process.kill()
            process.wait()
    return process, port
