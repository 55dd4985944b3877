"""An operator steers a being of the fleet with `singularity fleet`: start, say (and wait
for the reply), pause, resume, top up, list, show, stop; bad requests are refused with the
reason and change nothing. One `singularity worker` process, the Temporal dev server, the
scripted gateway with prices."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from singularity.fleet import control
from singularity.fleet.connection import TemporalConnection, connect
from singularity.fleet.dev import TemporalDevServer
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.fleet import (
    SINGULARITY,
    WorkerProcess,
    check_life,
    dev_server,
    journal,
    priced_flags,
    verify,
)
from tests.support.polling import wait_for

__all__ = ["dev_server"]
KEY = "ada"


def _fleet(target: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SINGULARITY, "fleet", *arguments, "--temporal", target],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _ok(target: str, *arguments: str) -> Any:
    done = _fleet(target, *arguments)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _refused(target: str, code: int, *arguments: str) -> str:
    done = _fleet(target, *arguments)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stdout == ""
    return done.stderr


def _status(target: str) -> str:
    """The being's status, asked in this process (the commands are tried once each)."""

    async def ask() -> str:
        client = await connect(TemporalConnection(target))
        return str((await control.status(client, KEY))["status"])

    return asyncio.run(ask())


def _events(root: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in journal(root / KEY / "state") if e["type"] == kind]


@pytest.mark.timeout(900)  # 163 s of the default 300 at a load of 10-17
def test_an_operator_steers_a_being_of_the_fleet(
    tmp_path: Path, dev_server: TemporalDevServer
) -> None:
    target, root = dev_server.target, tmp_path / "beings"
    # A long interval: the being lives its first cycle, then only when a message comes.
    with ScriptedServer([], default=Turn.text("at your service")) as gateway:
        flags = priced_flags(gateway, "3600")
        worker = WorkerProcess(target, root, flags, tmp_path / "worker.log")
        try:
            assert "not an option of a being" in _refused(
                target, 2, "start", KEY, "--set", "state_dir=/tmp/elsewhere"
            )
            assert "being key" in _refused(target, 2, "start", "no spaces")
            started = _ok(
                target, "start", KEY, "--set", "starting_balance=1", "--set", "agent_name=Ada"
            )
            assert started["key"] == KEY
            assert "already lives" in _refused(target, 4, "start", KEY)
            wait_for(lambda: _events(root, "cycle_finished"), "the first cycle")

            said = _fleet(target, "say", KEY, "How are you?", "--wait", "--timeout", "120")
            assert said.returncode == 0, said.stderr
            assert said.stdout == "at your service\n"
            assert [e["cycle"] for e in _events(root, "cycle_finished")] == [1, 2]

            _ok(target, "pause", KEY)
            wait_for(lambda: _status(target) == "paused", "the pause", interval=0.2)
            _ok(target, "resume", KEY)
            wait_for(lambda: _status(target) == "running", "the resume", interval=0.2)

            assert "more than zero" in _refused(target, 4, "topup", KEY, "0")
            _ok(target, "topup", KEY, "2.5", "--note", "a gift")
            wait_for(lambda: _events(root, "operator_credited"), "the credit")
            [credit] = _events(root, "operator_credited")
            assert (credit["amount"], credit["note"]) == ("2.5", "a gift")
            shown = _ok(target, "show", KEY)
            assert shown["earned_usd"] == "0"  # an operator credit is never revenue
            assert shown["waiting"] == []

            [listed] = _ok(target, "list", "--json")
            assert (listed["key"], listed["worker"]) == (KEY, worker.name)

            _ok(target, "stop", KEY)
            wait_for(lambda: _status(target) == "stopped", "the stop", interval=0.2)
            assert _ok(target, "list", "--json") == []
            assert _ok(target, "show", KEY)["status"] == "stopped"  # its last word stays
            assert "no living being" in _refused(target, 4, "show", "bob")
        finally:
            worker.stop()
    events = journal(root / KEY / "state")
    assert check_life(events) == []
    assert events[-1]["type"] == "stopped"
    checked = verify(root / KEY / "state")
    assert checked.returncode == 0, checked.stdout + checked.stderr
