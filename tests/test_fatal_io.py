"""A failed write or sync of a living being's state is fatal, and says so (decisions 10, 12).

Contract: EIO or ENOSPC on any write or sync of a step's record in `state.redo`, of
`activity.jsonl`, of the conversation archive or of a checkpoint's `state.json` stops the
being at once with exit 4 and one clear line on stderr, never a traceback. Nothing is
written again after the failure: no later step reaches the log, no line the journal. A
step whose record was written stays whole (it is replayed); one whose record failed is
not durable. The being resumes afterwards and `verify` passes. A terminal that cannot be
written (ENOSPC on stderr) does not stop a being.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from singularity.errors import FatalIoError
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.storage import fsio
from singularity.store import redo
from singularity.store.directory import DirectoryStore
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.loop_http import Result, all_events, boot, cli_args, run, state_of

ADD_RULE = "singularity_self_add_rule"
# Steps after the birth's checkpoint: `started` (1), the first cycle's framing (2), its
# reservation (3), then its completion with the debit (4), between a model call and its
# tool call.
STEP = 4
STEP_FAILURES = [
    f"redo.write=enospc@{STEP}",
    f"redo.write=eio@{STEP}",
    f"redo.fsync=eio@{STEP}",
    f"redo.fsync=enospc@{STEP}",
]
JOURNAL_FAILURES = [f"activity.write=enospc@{STEP}", f"activity.write=eio@{STEP}"]
# The second checkpoint is the clean stop's (the first is the birth).
CHECKPOINT_FAILURES = [
    "state.write=enospc@2",
    "state.fsync=eio@2",
    "state.rename=eio@2",
    "state.dirsync=eio@2",
    "state.dirsync=enospc@2",
    "activity.fsync=eio@2",
]


def _script() -> list[Turn]:
    return [Turn.tool_call(ADD_RULE, {"rule": f"rule {n}"}) for n in range(6)]


def _records(root: Path) -> list[redo.Record]:
    return redo.scan((root / "being" / redo.REDO_FILE).read_bytes()).records


def _journal_bytes(root: Path) -> int:
    return (root / "being" / "activity.jsonl").stat().st_size


def _resume_and_verify(root: Path, cli: Callable[..., Result], server: ScriptedServer) -> None:
    resumed = cli("once", "--resume", *cli_args(root, server))
    assert resumed.code == 0, resumed.err
    assert verify_state_dir(str(root / "being")) == []


def _failed_run(
    spec: str, root: Path, cli: Callable[..., Result], server: ScriptedServer
) -> Result:
    fsio.arm_failpoints(spec)
    try:
        result = cli("run", *cli_args(root, server, "--max-cycles", "3"))
    finally:
        fsio.arm_failpoints("")
    assert result.code == 4
    assert "Traceback" not in result.err
    return result


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(_script()) as started:
        yield started


@pytest.mark.parametrize("spec", STEP_FAILURES)
def test_a_failed_step_record_stops_the_being(
    spec: str, tmp_path: Path, cli: Callable[..., Result], server: ScriptedServer
) -> None:
    result = _failed_run(spec, tmp_path, cli, server)
    assert result.err.splitlines()[-1].startswith("singularity: cannot append to state.redo: ")
    records = _records(tmp_path)
    # A failed write leaves no record; a failed sync leaves one that may or may not last.
    assert len(records) == (STEP - 1 if ".write=" in spec else STEP)
    # The journal holds the lines of the steps before, and nothing of this one or later.
    assert _journal_bytes(tmp_path) == records[STEP - 2].activity_end
    assert b'"type":"stopped"' not in (tmp_path / "being" / "activity.jsonl").read_bytes()
    _resume_and_verify(tmp_path, cli, server)


@pytest.mark.parametrize("spec", JOURNAL_FAILURES)
def test_a_failed_journal_append_stops_the_being(
    spec: str, tmp_path: Path, cli: Callable[..., Result], server: ScriptedServer
) -> None:
    result = _failed_run(spec, tmp_path, cli, server)
    assert result.err.splitlines()[-1].startswith("singularity: cannot append to activity.jsonl: ")
    records = _records(tmp_path)
    assert len(records) == STEP, "the step is durable in its record; no later step is"
    assert _journal_bytes(tmp_path) == records[STEP - 1].activity_at, "nothing was appended"
    assert state_of(tmp_path).cycle == 1  # the current state holds the step
    _resume_and_verify(tmp_path, cli, server)
    # The boot wrote the step's lines back from its record.
    assert [e["type"] for e in all_events(tmp_path)].count("cost_debited") >= 1


@pytest.mark.parametrize("spec", CHECKPOINT_FAILURES)
def test_a_failed_checkpoint_stops_the_being(
    spec: str, tmp_path: Path, cli: Callable[..., Result], server: ScriptedServer
) -> None:
    result = _failed_run(spec, tmp_path, cli, server)
    wanted = "cannot sync activity.jsonl: " if "activity" in spec else "cannot save state.json: "
    assert result.err.splitlines()[-1].startswith(f"singularity: {wanted}")
    # The clean stop's last step is durable in the log; state.json is still the birth's,
    # unless only the directory sync after its rename failed.
    events = [e["type"] for e in all_events(tmp_path)]
    assert events[-1] == "stopped" and events.count("stopped") == 1
    checkpoint = json.loads((tmp_path / "being" / "state.json").read_bytes())
    if ".dirsync=" in spec:
        assert checkpoint["status"] == "stopped"
    else:
        assert (checkpoint["cycle"], checkpoint["status"]) == (0, "starting")
    assert state_of(tmp_path).status == "stopped"
    _resume_and_verify(tmp_path, cli, server)


@pytest.mark.parametrize("spec", ["archive.write=enospc", "archive.fsync=eio"])
def test_a_failed_archive_append_stops_the_being_failed(spec: str, tmp_path: Path) -> None:
    with ScriptedServer(_script()) as server:

        async def live() -> None:
            runtime = boot(tmp_path, server)
            runtime.being.window_messages = 3
            assert isinstance(runtime.being.store, DirectoryStore)
            runtime.being.store.archive_batch = 0  # each step writes its archive lines
            fsio.arm_failpoints(spec)
            try:
                with pytest.raises(FatalIoError, match=r"conversation\.jsonl"):
                    await runtime.run(max_cycles=3)
                    await runtime.shutdown()  # the archive is synced at the checkpoint
            finally:
                fsio.arm_failpoints("")
                await runtime.shutdown()

        run(live())
    records = _records(tmp_path)
    if "write" in spec:
        # A step writes its archive lines before its record: the step that would have
        # archived was never logged, and nothing came after it.
        assert _journal_bytes(tmp_path) == records[-1].activity_end
        assert "stopped" not in [e["type"] for e in all_events(tmp_path)]
        [problem] = verify_state_dir(str(tmp_path / "being"))
        assert problem.endswith("(the next boot charges them)"), problem
    else:
        assert [e["type"] for e in all_events(tmp_path)][-1] == "stopped"
    with ScriptedServer([Turn.text("again")]) as server:

        async def resume() -> None:
            runtime = boot(tmp_path, server, resume="true")
            await runtime.shutdown()

        run(resume())
    assert verify_state_dir(str(tmp_path / "being")) == []


def test_a_full_terminal_does_not_stop_a_being(tmp_path: Path) -> None:
    """ENOSPC on stderr: the being lives its cycle and saves. ENOSPC on stdout too: the
    report cannot be written, which is an I/O error (exit 4), and the being is saved."""
    env = clean_environment()
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
