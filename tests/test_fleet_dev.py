"""The Temporal dev server that `fleet dev` and the tests start: it is up only when the
socket listening on its port is its own, never because another program answers there; and
`fleet dev` stops both servers cleanly on SIGTERM as on Ctrl-C."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from singularity.errors import RuntimeFailure
from singularity.fleet.dev import TemporalDevServer, listens
from tests.support.postgres import postgres_server

FLEET_DEV = (sys.executable, "-m", "singularity", "fleet", "dev")


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


def _report(process: subprocess.Popen[str]) -> dict[str, str]:
    """`fleet dev`'s printed report (a pretty JSON object), once its servers are up."""
    assert process.stdout is not None
    lines = []
    while not lines or lines[-1] != "}\n":
        line = process.stdout.readline()
        assert line, f"fleet dev exited before it reported: {process.wait()}"
        lines.append(line)
    return dict(json.loads("".join(lines)))


@pytest.fixture
def trial() -> Iterator[Path]:
    """A folder for `fleet dev` that PostgreSQL's own user can reach when we are root
    (pytest's temporary folders are private to their owner)."""
    folder = Path(tempfile.mkdtemp(prefix="singularity-fleet-dev-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_sigterm_stops_fleet_dev_and_both_servers_cleanly(trial: Path) -> None:
    bin_dir = Path(postgres_server().bin_dir)  # skips when the package is missing
    process = subprocess.Popen(
        [*FLEET_DEV, "--dir", str(trial), "--port", "0", "--no-ui"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        report = _report(process)
        data = trial / "postgres" / "data"
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=600) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()
    host, _, port = report["temporal"].rpartition(":")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=10).close()
    assert not Path(f"/proc/{postmaster}").exists() or _zombie(postmaster)
    control = subprocess.run(
        [str(bin_dir / "pg_controldata"), str(data)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Database cluster state:               shut down\n" in control


def _zombie(pid: int) -> bool:
    """Whether process `pid` has ended and waits for a parent that does not reap it."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] == "Z"
