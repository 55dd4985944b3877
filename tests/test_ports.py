"""Servers the tests start on free ports: a port taken before the child binds it is never
mistaken for the child's, and the child is started again on another port."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from singularity.fleet.dev import listens
from tests.support.living import terminate
from tests.support.ports import START_ATTEMPTS, closed_port_url, serve_on_free_port


def _http_server(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_a_port_taken_between_the_probe_and_the_bind_is_left_for_another() -> None:
    taken: list[socket.socket] = []
    tried: list[int] = []

    def launch_after_a_thief(port: int) -> subprocess.Popen[bytes]:
        tried.append(port)
        if not taken:  # another program takes the first port before the child can
            thief = socket.socket()
            thief.bind(("127.0.0.1", port))
            thief.listen()
            taken.append(thief)
        return _http_server(port)

    try:
        process, port = serve_on_free_port(launch_after_a_thief, "http.server")
        try:
            assert len(tried) == 2 and port == tried[1] != tried[0]
            assert listens(process.pid, port)
        finally:
            terminate(process)
    finally:
        for thief in taken:
            thief.close()


def test_a_child_that_never_listens_is_reported_after_every_attempt() -> None:
    def launch_on_a_taken_port(port: int) -> subprocess.Popen[bytes]:
        return _http_server(int(closed_port_url().rsplit(":", 1)[1].rstrip("/")))

    with pytest.raises(AssertionError) as failed:
        serve_on_free_port(launch_on_a_taken_port, "http.server")
    assert str(failed.value).startswith(
        f"http.server exited with 1 before it listened, on each of {START_ATTEMPTS} free ports"
    )


def test_a_closed_port_refuses_connections() -> None:
    port = int(closed_port_url().rsplit(":", 1)[1].rstrip("/"))
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
