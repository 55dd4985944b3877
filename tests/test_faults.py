"""Living through faults (decision 25), as an operator sees it from outside the process.

A gateway that is down: the being backs off, journals each failure once and shows it once,
and writes no session note for a cycle in which no model round happened.
`--log-format json` writes nothing but JSON lines on stderr. A socket left by a killed
runtime does not block an offline import. `verify` runs beside a living being (its model
call in flight is a warning, not a problem) and takes `--state-dir` like every command.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from singularity.runtime.mind_import.service import SOCKET_NAME
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.living import run_command
from tests.support.loop_http import boot, cli_args, journal, run, state_of
from tests.support.polling import wait_for, wait_for_async
from tests.support.ports import closed_port_url

MIND = {
    "schema_version": "singularity-mind-import-v1",
    "source": {"kind": "notes-export", "id": "laptop"},
    "memories": [{"id": "m1", "text": "The user prefers tea."}],
}


@pytest.fixture
def living(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()


def _spawn(root: Path, url: str, processes: list[subprocess.Popen[bytes]]) -> None:
    log = (root / "stderr.txt").open("wb")
    processes.append(
        subprocess.Popen(
            [str(SINGULARITY), "run", *cli_args(root, url)],
            cwd=root,
            env=clean_environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    )
    log.close()


# --- a gateway that is down -------------------------------------------------------------


def test_json_logs_are_only_json_and_each_fault_is_shown_once(tmp_path: Path) -> None:
    result = run_command(
        tmp_path,
        "run",
        *cli_args(tmp_path, closed_port_url(), "--max-cycles", "3"),
        "--log-format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]  # each one is JSON
    warnings = [line["message"] for line in lines if line["type"] == "warning"]
    assert len(warnings) == 3 and all("transport error" in w for w in warnings)
    assert not [
        line
        for line in lines
        if "transport error" in str(line.get("message", "")) and line["type"] != "warning"
    ]  # shown once, as the journaled warning
    assert [e["message"] for e in journal(tmp_path) if e["type"] == "warning"] == warnings
    sessions = tmp_path / "being" / "sanctum" / "memory" / "sessions"
    assert not sessions.exists() or list(sessions.iterdir()) == []  # no model round, no note
    assert [e["type"] for e in journal(tmp_path)].count("session_note_auto") == 0


def test_the_final_error_is_a_json_line_too(tmp_path: Path) -> None:
    result = run_command(
        tmp_path, "once", *cli_args(tmp_path, closed_port_url()), "--log-format", "json"
    )
    assert result.returncode == 3
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert lines[-1]["type"] == "error" and lines[-1]["exit_code"] == 3
    assert lines[-1]["message"].startswith("singularity: brama: transport error: ")


def test_text_logs_show_each_fault_once(tmp_path: Path) -> None:
    result = run_command(
        tmp_path, "run", *cli_args(tmp_path, closed_port_url(), "--max-cycles", "2")
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("transport error") == 2, result.stderr


def test_a_failing_gateway_is_asked_less_and_less_often(tmp_path: Path) -> None:
    async def live() -> tuple[int, float, float, int, float]:
        async with ScriptedServer() as unused:
            down = closed_port_url()
            runtime = boot(tmp_path, unused, cycle_interval_secs="0.01", brama_url=down)
            try:
                await runtime.run(3)
                failures, waited = runtime.failures, runtime.next_wait()
                runtime.failures = 50
                capped = runtime.next_wait()
            finally:
                await runtime.shutdown()
        async with ScriptedServer([Turn.error(503, "busy"), Turn.text("up again")]) as server:
            again = boot(tmp_path, server, cycle_interval_secs="0.01", resume="true")
            try:
                await again.run(2)
                return failures, waited, capped, again.failures, again.next_wait()
            finally:
                await again.shutdown()

    failures, waited, capped, after, wait_after = run(live())
    assert failures == 3
    assert waited == pytest.approx(0.01 * 2**3)  # doubled for each failure in a row
    assert capped == pytest.approx(0.01 * 60)  # never more than sixty intervals
    assert (after, wait_after) == (0, pytest.approx(0.01))  # an answer resets it
    assert state_of(tmp_path).cycle == 5


# --- import and verify beside a being -----------------------------------------------------


def test_an_offline_import_removes_a_socket_a_killed_runtime_left(
    tmp_path: Path, living: list[subprocess.Popen[bytes]]
) -> None:
    mind = tmp_path / "mind.json"
    mind.write_text(json.dumps(MIND))
    with ScriptedServer(default=Turn.text("resting").delayed(60)) as server:
        _spawn(tmp_path, server.url, living)
        sock = tmp_path / "being" / SOCKET_NAME
        wait_for(lambda: sock.exists() and server.completions, "the being to live")
        living[0].send_signal(signal.SIGKILL)
        living[0].wait()
    assert sock.exists()
    result = run_command(tmp_path, "import", "--file", str(mind), "--state-dir", "being")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["accepted"] is True
    assert not sock.exists()
    assert [memory.text for memory in state_of(tmp_path).mind.memories] == ["The user prefers tea."]


def test_verify_beside_a_being_whose_model_call_is_in_flight(
    tmp_path: Path, living: list[subprocess.Popen[bytes]]
) -> None:
    with ScriptedServer([Turn.text("slow thought").delayed(60)]) as server:
        _spawn(tmp_path, server.url, living)
        wait_for(lambda: server.completions, "the model call")
        wait_for(
            lambda: "cost_reserved" in [e["type"] for e in journal(tmp_path)], "the reservation"
        )
        result = run_command(tmp_path, "verify", "--state-dir", "being")
        living[0].send_signal(signal.SIGTERM)
    # Leaving the server dropped the call: the being stops at the next safe point.
    assert living[0].wait(90) == 0
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "being: ok"
    assert any(line.startswith("being: warning: a model call is in flight") for line in lines)
    after = run_command(tmp_path, "verify", "being")
    assert (after.returncode, after.stdout) == (0, "being: ok\n")


def test_verify_takes_the_state_directory_either_way(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        assert run_command(tmp_path, "once", *cli_args(tmp_path, server.url)).returncode == 0
    by_flag = run_command(tmp_path, "verify", "--state-dir", "being")
    by_argument = run_command(tmp_path, "verify", "being")
    assert by_flag.stdout == by_argument.stdout == "being: ok\n"
    assert (by_flag.returncode, by_argument.returncode) == (0, 0)
    both = run_command(tmp_path, "verify", "being", "--state-dir", "elsewhere")
    assert both.returncode == 2 and "give the state directory once" in both.stderr
    (tmp_path / ".singularity").mkdir(mode=0o700)
    default = run_command(tmp_path, "verify")
    assert default.returncode == 4 and default.stdout.startswith(".singularity: ")


def test_verify_without_a_being_sees_no_flight(tmp_path: Path) -> None:
    async def crashed_mid_call() -> None:
        async with ScriptedServer([Turn.text("never").delayed(60)]) as server:
            runtime = boot(tmp_path, server)
            task = asyncio.create_task(runtime.once())
            await wait_for_async(lambda: server.completions, "the model call")
            task.cancel()
            runtime.being.close()  # the lock is released: nobody lives there now

    run(crashed_mid_call())
    result = run_command(tmp_path, "verify", "being")
    assert result.returncode == 4
    assert "being: 1 reservation(s) have no outcome (the next boot charges them)" in result.stdout
