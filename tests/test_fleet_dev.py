"""The Temporal dev server that `fleet dev` and the tests start: it is up only when the
socket listening on its port is its own, never because another program answers there."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from singularity.errors import RuntimeFailure
from singularity.fleet.dev import TemporalDevServer, listens


def test_a_port_another_program_listens_on_is_never_taken_for_the_server(
    tmp_path: Path,
) -> None:
    log = tmp_path / "temporal.log"
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        server = TemporalDevServer(port=port, log_path=str(log))
        with pytest.raises(RuntimeFailure) as refused:
            server.start()
    assert str(refused.value) == (
        f"runtime: temporal server start-dev exited before it listened on 127.0.0.1:{port} "
        f"(see {log})"
    )
    assert "address already in use" in log.read_text()
    assert server.process is None


def test_a_server_on_a_port_of_its_own_choosing_listens_there_itself(tmp_path: Path) -> None:
    server = TemporalDevServer(log_path=str(tmp_path / "temporal.log")).start()
    try:
        assert server.process is not None
        assert listens(server.process.pid, server.port)
    finally:
        server.stop()
