"""A failed write or sync of a living being's state is fatal, and says so (decisions 10, 12).

Contract: EIO or ENOSPC on any write or sync of `activity.jsonl`, `state.json` or the
conversation archive stops the being at once with exit 4 and one clear line on stderr,
never a traceback. Nothing is appended or saved again, except one last record of the
failure where it can still be written: after a failed journal append `state.json` is
saved with status `failed`; after a failed save the journal records `stopped` with
status `failed`. The being resumes afterwards and `verify` passes. A terminal that
cannot be written (ENOSPC on stderr) does not stop a being.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from singularity.errors import FatalIoError
from singularity.runtime.verify import verify_state_dir
from singularity.storage import fsio
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import (
    OPTION_PREFIXES,
    Result,
    all_events,
    boot,
    cli_args,
    run,
    state_of,
)

ADD_RULE = "singularity_self_add_rule"
SINGULARITY = Path(sys.executable).with_name("singularity")
# The 6th append or save lands in the first cycle, between a model call and its tool call.
JOURNAL_FAILURES = [
    "activity.write=enospc@6",
    "activity.write=eio@6",
    "activity.fsync=eio@6",
    "activity.fsync=enospc@6",
]
STATE_FAILURES = [
    "state.write=enospc@3",
    "state.fsync=eio@3",
    "state.rename=eio@3",
    "state.dirsync=eio@3",
    "state.dirsync=enospc@3",
]



def _script() -> list[Turn]:
    return [Turn.tool_call(ADD_RULE, {"rule": f"rule {n}"}) for n in range(6)]


def _lines(root: Path) -> list[bytes]:
    return (root / "being" / "activity.jsonl").read_bytes().splitlines()


def _resume_and_verify(root: Path, cli: Callable[..., Result], server: ScriptedServer) -> None:
    resumed = cli("once", "--resume", *cli_args(root, server))
    assert resumed.code == 0, resumed.err
    assert verify_state_dir(str(root / "being")) == []


@pytest.mark.parametrize("spec", JOURNAL_FAILURES)
def test_a_failed_journal_append_stops_the_being_failed(
    spec: str, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer(_script()) as server:
        fsio.arm_failpoints(spec)
        result = cli("run", *cli_args(tmp_path, server, "--max-cycles", "3"))
        fsio.arm_failpoints("")
        lines = _lines(tmp_path)
        assert result.code == 4
        assert "Traceback" not in result.err
        assert result.err.splitlines()[-1].startswith(
            "singularity: cannot append to activity.jsonl: "
        )
        written = 5 if ".write=" in spec else 6  # a failed write leaves nothing
        assert len(lines) == written, "nothing is appended after the failure"
        assert b'"type":"stopped"' not in b"".join(lines)
        assert state_of(tmp_path).status == "failed"
        _resume_and_verify(tmp_path, cli, server)


@pytest.mark.parametrize("spec", STATE_FAILURES)
def test_a_failed_save_stops_the_being_failed(
    spec: str, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer(_script()) as server:
        fsio.arm_failpoints(spec)
        result = cli("run", *cli_args(tmp_path, server, "--max-cycles", "3"))
        fsio.arm_failpoints("")
        assert result.code == 4
        assert "Traceback" not in result.err
        assert result.err.splitlines()[-1].startswith("singularity: cannot save state.json: ")
        events = all_events(tmp_path)
        assert events[-1]["type"] == "stopped" and events[-1]["status"] == "failed"
        assert [e["type"] for e in events].count("stopped") == 1
        _resume_and_verify(tmp_path, cli, server)


@pytest.mark.parametrize("spec", ["archive.write=enospc", "archive.fsync=eio"])
def test_a_failed_archive_append_stops_the_being_failed(spec: str, tmp_path: Path) -> None:
    with ScriptedServer(_script()) as server:

        async def live() -> None:
            runtime = boot(tmp_path, server)
            runtime.being.window_messages = 3
            fsio.arm_failpoints(spec)
            try:
                with pytest.raises(FatalIoError, match=r"cannot append to conversation\.jsonl"):
                    await runtime.run(max_cycles=3)
            finally:
                fsio.arm_failpoints("")
                await runtime.shutdown()

        run(live())
    events = all_events(tmp_path)
    assert events[-1]["type"] == "stopped" and events[-1]["status"] == "failed"
    assert state_of(tmp_path).status == "running", "the failed save left the last good state"


def test_a_full_terminal_does_not_stop_a_being(tmp_path: Path) -> None:
    """ENOSPC on stderr: the being lives its cycle and saves. ENOSPC on stdout too: the
    report cannot be written, which is an I/O error (exit 4), and the being is saved."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(OPTION_PREFIXES)}
    script = [Turn.tool_call(ADD_RULE, {"rule": "kept"}), Turn.text("done"), Turn.text("again")]
    with ScriptedServer(script) as server, open("/dev/full", "w") as full:
        args = cli_args(tmp_path, server)
        shown = subprocess.run(
            [str(SINGULARITY), "once", *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=full,
        )
        assert shown.returncode == 0
        assert json.loads(shown.stdout)["status"] == "completed"
        for log_format in ("text", "json"):
            nowhere = subprocess.run(
                [str(SINGULARITY), "once", "--resume", "--log-format", log_format, *args],
                cwd=tmp_path,
                env=env,
                stdout=full,
                stderr=full,
            )
            assert nowhere.returncode == 4
        told = subprocess.run(
            [str(SINGULARITY), "once", "--resume", *args],
            cwd=tmp_path,
            env=env,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert told.returncode == 4
    assert told.stderr.splitlines()[-1] == (
        "singularity: cannot write the report to stdout: No space left on device (os error 28)"
    )
    state = state_of(tmp_path)
    assert state.mind.rules == ["kept"]
    assert (state.status, state.cycle) == ("stopped", 4)
    assert verify_state_dir(str(tmp_path / "being")) == []
