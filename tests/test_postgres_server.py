"""The tests' PostgreSQL server never outlives the process that started it: its watchdog
stops it and removes its folder when that process is killed without a chance to stop it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.polling import wait_for
from tests.support.postgres import postgres_server, start_server

ROOT = Path(__file__).resolve().parent.parent
OWNER = """
import json, os, sys
from tests.support.postgres import postgres_server
server = postgres_server()
with open(os.path.join(server.data_dir, "postmaster.pid")) as pid:
    postmaster = int(pid.readline())
if sys.argv[1] == "fork" and os.fork() == 0:
    sys.stdin.read()  # outlives the owner, until the test closes their stdin
    os._exit(0)
print(json.dumps({"dir": server.data_dir, "postmaster": postmaster}), flush=True)
sys.stdin.read()
"""


def _ended(pid: int) -> bool:
    """Whether process `pid` is gone (a zombie nobody reaps counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("child", ["none", "fork"])
def test_a_server_whose_owner_is_killed_is_stopped_and_removed(child: str) -> None:
    """Even while a child the owner forked lives on."""
    postgres_server()  # skips when the package is missing
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, child],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None and owner.stdin is not None
    started = json.loads(owner.stdout.readline())
    assert not _ended(started["postmaster"])
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    try:
        wait_for(lambda: _ended(started["postmaster"]), "the orphaned server to stop")
        folder = os.path.dirname(started["dir"])
        wait_for(lambda: not os.path.exists(folder), "the orphaned server's folder to go")
    finally:
        owner.stdin.close()  # the forked child's stdin too: it ends
        owner.stdout.close()


def test_a_stopped_server_releases_its_watchdog() -> None:
    server = postgres_server()
    own = start_server()
    watchdog = own.watchdog
    assert watchdog is not None and watchdog.poll() is None
    own.stop()
    assert watchdog.returncode is not None
    assert not os.path.exists(os.path.dirname(own.data_dir))
    assert server.watchdog is not None and server.watchdog.poll() is None
