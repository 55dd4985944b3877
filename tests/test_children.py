"""Child beings (spec §14, decision 17): a real family, the spawn tool's errors, `children`.

The end-to-end test runs the real program: a parent `singularity once` driven by a
scripted gateway spawns a child, which boots in `<state>/children/<uuid>/`, lives its
cycles against the same gateway and stops `exhausted` when its funding runs out. The
error paths call the real spawn tool in-process, through the same dispatch, record,
journal and save a cycle uses, and compare the parent before and after.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from singularity.cli.children import children as children_command
from singularity.domain.records import ChildRecord
from singularity.runtime.family import children
from singularity.runtime.family.tree import family_tree, is_alive
from singularity.storage import fsio
from singularity.testing.scripted_server import Turn
from tests.support.children_gateway import FamilyGateway, spawn_turn
from tests.support.children_inproc import (
    open_parent,
    parent_settings,
    snapshot,
    spawn_call,
)
from tests.support.children_procs import (
    TAG,
    being_money,
    budget_balances,
    clean_environment,
    cli_json,
    environ_of,
    family_reaper,
    grant_in,
    journal,
    new_tag,
    run_cli,
    spawn_results,
    state_json,
    tagged_pids,
)
from tests.support.polling import wait_for

SPAWN = children.SPAWN_CHILD.name
# The gateway reports 100 completion tokens for every answer: at 1000 USD per million a
# call costs 0.1 USD (and a millionth for its prompt), about what the runtime reserves
# for it, so a child funded with 0.5 USD lives four cycles whatever the prompt's size.
PRICES = {"input_price": "0.01", "output_price": "1000", "instance_price": "0"}
COMPLETION_TOKENS = 100


def _flags(server_url: str, **extra: str) -> dict[str, str]:
    # Relative state directories: the import socket of a child must fit in a socket address.
    return {
        **PRICES,
        "state_dir": "parent",
        "workspace": "ws",
        "agent_name": "Parent",
        "agent_ticker": "PAR",
        "starting_balance": "5",
        "cycle_interval_secs": "0",
        "max_tokens": str(COMPLETION_TOKENS),
        "max_tool_rounds": "4",
        "http_timeout_secs": "60",
        "brama_url": server_url,
        **extra,
    }


def test_a_spawned_child_lives_until_its_funding_runs_out(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    release = threading.Event()

    def plan(name: str, number: int) -> Turn | None:
        if name == "Parent" and number == 0:
            return spawn_turn("Kid", "KID", "testing", "0.5")
        if name == "Kid" and number == 0:
            release.wait(90)  # hold the child in its first model call while we look at it
            return Turn.text("first thought")
        return None

    tag = new_tag()
    env = clean_environment(tag)
    with FamilyGateway(plan, completion_tokens=COMPLETION_TOKENS) as gateway, family_reaper(tag):
        try:
            result = run_cli(
                "once", _flags(gateway.url), env=env, cwd=tmp_path, log=tmp_path / "parent.log"
            )
            assert result.returncode == 0, (tmp_path / "parent.log").read_text()[-3000:]
            parent = state_json(tmp_path / "parent")
            assert parent is not None
            [record] = parent["mind"]["children"]
            [spawned] = spawn_results(parent)
            assert spawned["child_id"] == record["id"] == str(uuid.UUID(record["id"]))
            assert (record["name"], record["ticker"], record["status"]) == ("Kid", "KID", "running")
            assert record["state_dir"] == os.path.join("parent", "children", record["id"])
            child_dir = tmp_path / record["state_dir"]
            assert [p.name for p in (tmp_path / "parent" / "children").iterdir()] == [record["id"]]

            # The child runs while the parent is gone: it holds its lock, in its own process.
            wait_for(lambda: gateway.requests_of("Kid") >= 1, "the child's first model call")
            child_env = environ_of(spawned["pid"])
            assert child_env is not None
            assert child_env["SINGULARITY_STATE_DIR"] == record["state_dir"]
            code, tree = cli_json(
                ["children", "--state-dir", "parent", "--json"], cwd=tmp_path, env=env
            )
            assert code == 0
            [entry] = tree
            assert (entry["id"], entry["name"], entry["ticker"]) == (record["id"], "Kid", "KID")
            assert (entry["alive"], entry["status"], entry["cycle"]) == (True, "running", 1)
            assert entry["balance_usd"] == entry["starting_usd"] == "0.5"
        finally:
            release.set()
        wait_for(lambda: not tagged_pids(tag), "the child to stop", timeout=90)

        child = state_json(child_dir)
        assert child is not None
        assert child["status"] == "exhausted"
        identity = child["identity"]
        assert (identity["name"], identity["ticker"], identity["specialty"]) == (
            "Kid",
            "KID",
            "testing",
        )
        assert child["mind"]["system_prompt"].startswith("You are Kid, ")
        assert child["cycle"] >= 2, "the child should live several cycles on 0.5 USD"
        # One text answer a cycle: the gateway saw exactly one request per child cycle.
        assert gateway.requests_of("Kid") == child["cycle"]
        assert gateway.requests_of("Parent") == 2
        money = being_money(child)
        assert money["starting"] == Decimal("0.5")
        assert budget_balances(money)
        assert money["remaining"] >= 0
        assert money["api_spent"] > 0

        # The parent paid exactly the funding, journaled once, claimed by the child.
        parent_money = being_money(parent)
        debits = sum(
            (
                Decimal(e["amount"])
                for e in journal(tmp_path / "parent")
                if e["type"] == "cost_debited"
            ),
            Decimal(0),
        )
        assert parent_money["children_funded"] == Decimal("0.5")
        assert parent_money["remaining"] == Decimal(5) - debits - Decimal("0.5")
        assert budget_balances(parent_money)
        [funded] = [e for e in journal(tmp_path / "parent") if e["type"] == "child_funded"]
        assert (funded["child_id"], funded["amount"]) == (record["id"], "0.5")
        claimed = grant_in(child_dir, "funding.claimed.json")
        assert claimed is not None
        assert (claimed.amount, claimed.operation_id) == (Decimal("0.5"), funded["operation_id"])
        assert not (child_dir / "funding.json").exists()
        assert not (child_dir / "funding.revoked.json").exists()

        for state_dir in ("parent", record["state_dir"]):
            verified = subprocess.run(
                [sys.executable, "-m", "singularity", "verify", state_dir],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            assert verified.returncode == 0, verified.stdout + verified.stderr

        code, tree = cli_json(
            ["children", "--state-dir", "parent", "--json"], cwd=tmp_path, env=env
        )
        assert code == 0
        [entry] = tree
        assert (entry["alive"], entry["status"], entry["cycle"]) == (
            False,
            "exhausted",
            child["cycle"],
        )
        assert entry["balance_usd"] == child["budget"]["remaining"]
        assert entry["children"] == []


# --- the spawn tool, in-process -------------------------------------------------------


@pytest.fixture
def fake_child(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Children are `/bin/true`: a real process that claims nothing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(children, "child_command", lambda: ["/bin/true"])


def _arguments(**extra: str) -> dict[str, str]:
    return {"name": "Kid", "ticker": "KID", "specialty": "testing", **extra}


def _assert_unchanged(before: Any, after: Any, *, refunded: bool = False) -> None:
    """Budget, children and files as before; the journal gained the tool's record only
    (and the funded/refunded pair of a refund)."""
    if refunded:
        before_budget = {k: v for k, v in before.budget.items() if k != "last_operation"}
        after_budget = {k: v for k, v in after.budget.items() if k != "last_operation"}
        assert after_budget == before_budget
    else:
        assert after.budget == before.budget
    assert after.children == before.children
    assert after.files == before.files, f"files left behind: {after.files - before.files}"
    assert after.events[: len(before.events)] == before.events
    kinds = [event["type"] for event in after.events[len(before.events) :]]
    expected = ["child_funded", "child_refunded"] if refunded else []
    assert kinds == [*expected, "tool_finished"]
    assert after.actions == before.actions + 1


def _failed_spawn(
    tmp_path: Path,
    arguments: dict[str, Any],
    code: str,
    *,
    failpoints: str = "",
    secrets: dict[str, str] | None = None,
    **flags: str,
) -> dict[str, Any]:
    settings = parent_settings(tmp_path, secrets=secrets, **flags)
    being = open_parent(settings, resume=(tmp_path / "parent" / "state.json").exists())
    try:
        before = snapshot(being, tmp_path / "parent")
        fsio.arm_failpoints(failpoints)
        try:
            outcome = spawn_call(being, settings, arguments)
        finally:
            fsio.arm_failpoints("")
        after = snapshot(being, tmp_path / "parent")
        assert (outcome.status.value, outcome.error_code) == ("failed", code), outcome
        _assert_unchanged(before, after)
        last = being.state.recent_actions[-1]
        assert (last.tool, last.status) == (SPAWN, "failed")
        assert json.loads(being.state.conversation[-1]["content"])["error_code"] == code
        return dict(outcome.content)
    finally:
        being.close()


def test_a_file_named_children_is_a_child_state_error(tmp_path: Path, fake_child: None) -> None:
    settings = parent_settings(tmp_path)
    open_parent(settings).close()
    (tmp_path / "parent" / "children").write_text("not a directory")
    _failed_spawn(tmp_path, _arguments(), "child_state")


def test_a_dangling_children_link_is_a_child_state_error(tmp_path: Path, fake_child: None) -> None:
    settings = parent_settings(tmp_path)
    open_parent(settings).close()
    (tmp_path / "parent" / "children").symlink_to(tmp_path / "nowhere")
    _failed_spawn(tmp_path, _arguments(), "child_state")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize(
    "failpoints",
    ["funding.write=enospc", "funding.fsync=eio", "funding.rename=enospc", "funding.dirsync=eio"],
)
def test_a_grant_that_cannot_be_written_is_a_child_state_error(
    tmp_path: Path, fake_child: None, failpoints: str
) -> None:
    _failed_spawn(tmp_path, _arguments(), "child_state", failpoints=failpoints)


def test_a_secret_file_that_cannot_be_written_is_a_child_state_error(
    tmp_path: Path, fake_child: None
) -> None:
    # The grant is written (the first funding write), the secret file is not (the second).
    _failed_spawn(
        tmp_path,
        _arguments(),
        "child_state",
        failpoints="funding.write=eio@2",
        secrets={"BRAMA_API_KEY": "canary-key"},
    )


def test_an_unresolvable_executable_is_a_child_executable_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "gone" / "python"))
    content = _failed_spawn(tmp_path, _arguments(), "child_executable")
    assert content["message"]


def test_a_child_command_that_raises_is_a_child_executable_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    def unresolvable() -> list[str]:
        raise FileNotFoundError("no interpreter")

    monkeypatch.setattr(children, "child_command", unresolvable)
    assert _failed_spawn(tmp_path, _arguments(), "child_executable") == {
        "message": "no interpreter"
    }


@pytest.mark.parametrize("command", ["missing", "directory", "not-executable"])
def test_a_refused_spawn_is_a_child_spawn_error_and_the_funding_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "bin" / "python"
    if command == "directory":
        target.mkdir(parents=True)
    elif command == "not-executable":
        target.parent.mkdir()
        target.write_text("#!/bin/sh\n")
        target.chmod(0o644)
        if os.geteuid() == 0:
            target.chmod(0o600)  # root may execute any file with an x bit; this has none
    monkeypatch.setattr(children, "child_command", lambda: [str(target), "-m", "singularity"])
    settings = parent_settings(tmp_path, secrets={"BRAMA_API_KEY": "canary-key"})
    being = open_parent(settings)
    try:
        before = snapshot(being, tmp_path / "parent")
        outcome = spawn_call(being, settings, _arguments(budget="2"))
        after = snapshot(being, tmp_path / "parent")
        assert outcome.error_code == "child_spawn"
        _assert_unchanged(before, after, refunded=True)
        funded, refunded = after.events[len(before.events) : len(before.events) + 2]
        assert funded["child_id"] == refunded["child_id"]
        assert funded["amount"] == refunded["amount"] == "2"
        assert funded["operation_id"] != refunded["operation_id"]
    finally:
        being.close()
    # The refund survives a restart: the journal and the saved budget agree.
    again = open_parent(settings, resume=True)
    try:
        assert again.state.budget.remaining == Decimal(10)
        assert again.state.budget.children_funded == 0
    finally:
        again.close()


@pytest.mark.parametrize(
    ("budget", "starting"),
    [("10", "10"), ("10.000000000001", "10"), ("11", "10"), ("1", "1"), ("0.5", "0.5")],
)
def test_a_budget_the_parent_cannot_spare_is_a_child_funding_error(
    tmp_path: Path, fake_child: None, budget: str, starting: str
) -> None:
    content = _failed_spawn(
        tmp_path, _arguments(budget=budget), "child_funding", starting_balance=starting
    )
    assert "solvent" in content["message"]


def test_a_parent_without_money_cannot_fund_a_default_child(
    tmp_path: Path, fake_child: None
) -> None:
    _failed_spawn(tmp_path, _arguments(), "child_funding", starting_balance="0")


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"name": "Kid", "ticker": "KID"},
        _arguments(name=""),
        _arguments(name="   "),
        _arguments(name="x" * 129),
        _arguments(name="é" * 65),  # 130 bytes
        _arguments(ticker="T" * 33),
        _arguments(specialty="s" * 257),
        _arguments(name="Kid\x1b[31m"),
        _arguments(budget="0"),
        _arguments(budget="-1"),
        _arguments(budget="abc"),
        _arguments(budget="NaN"),
        _arguments(budget="Infinity"),
        _arguments(budget="1e-3"),
        _arguments(budget="1_0"),
        _arguments(budget="0.00000000000000000000000000001"),  # beyond the 28th place
        _arguments(budget="79228162514264337593543950336"),  # beyond the money range
        {**_arguments(), "budget": 1},
        {**_arguments(), "name": 7},
    ],
)
def test_invalid_arguments_change_nothing(
    tmp_path: Path, fake_child: None, arguments: dict[str, Any]
) -> None:
    content = _failed_spawn(tmp_path, arguments, "invalid_arguments")
    assert content["message"].endswith("is invalid")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (_arguments(name="x" * 128, ticker="T" * 32, specialty="s" * 256), None),
        (_arguments(name="  Kid  "), None),
        (_arguments(budget="3"), "3"),
        (_arguments(budget="0.000000000001"), "0.000000000001"),
        (_arguments(budget="9.999999999999"), "9.999999999999"),
    ],
)
def test_a_funded_spawn_moves_exactly_its_budget(
    tmp_path: Path, fake_child: None, arguments: dict[str, str], expected: str | None
) -> None:
    settings = parent_settings(tmp_path, starting_balance="10")
    being = open_parent(settings)
    try:
        outcome = spawn_call(being, settings, arguments)
        assert outcome.status.value == "success", outcome
        amount = Decimal(expected) if expected is not None else Decimal(5)  # default: half of 10
        child_id = outcome.content["child_id"]
        assert isinstance(outcome.content["pid"], int)
        budget = being.state.budget
        assert budget.remaining == Decimal(10) - amount
        assert budget.children_funded == amount
        [record] = being.state.mind.children
        assert record.id == child_id
        assert record.name == arguments["name"].strip()
        grant = grant_in(tmp_path / "parent" / "children" / child_id, "funding.json")
        assert grant is not None and grant.amount == amount and grant.child_id == child_id
    finally:
        being.close()


@pytest.mark.parametrize(
    ("starting", "earned", "default"),
    [
        ("10", "100", "10"),  # the configured starting balance, when the parent is rich
        ("10", "0", "5"),  # half of what remains
        ("3", "0", "1.5"),
        ("0.0000000000000000000000000003", "0", "0.0000000000000000000000000001"),  # rounded down
    ],
)
def test_default_funding_is_the_starting_balance_capped_at_half_of_what_remains(
    tmp_path: Path, fake_child: None, starting: str, earned: str, default: str
) -> None:
    settings = parent_settings(tmp_path, starting_balance=starting)
    being = open_parent(settings)
    try:
        budget = being.state.budget
        budget.earned += Decimal(earned)
        budget.remaining += Decimal(earned)
        outcome = spawn_call(being, settings, _arguments())
        assert outcome.status.value == "success", outcome
        [funded] = [e for e in journal(tmp_path / "parent") if e["type"] == "child_funded"]
        assert Decimal(funded["amount"]) == Decimal(default)
        assert funded["amount"] == default
        assert budget.remaining == Decimal(starting) + Decimal(earned) - Decimal(default)
        assert budget.children_funded == Decimal(default)
    finally:
        being.close()


def test_a_child_never_runs_a_singularity_package_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The working directory is the default workspace: a being can write files there. A
    # `python -m singularity` child would import them before the real program.
    package = tmp_path / "singularity"
    package.mkdir()
    marker = tmp_path / "hijacked"
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    tag = new_tag()
    monkeypatch.setitem(os.environ, TAG, tag)
    # Tokens so dear that the child is exhausted before its first call: it boots and stops.
    settings = parent_settings(tmp_path, input_price="1000000", brama_url="http://127.0.0.1:9")
    being = open_parent(settings)
    with family_reaper(tag):
        try:
            outcome = spawn_call(being, settings, _arguments(budget="1"))
        finally:
            being.close()
        assert outcome.status.value == "success", outcome
        child_dir = tmp_path / "parent" / "children" / outcome.content["child_id"]
        wait_for(lambda: not tagged_pids(tag), "the child to stop")
    assert not marker.exists(), "the child ran the package planted in the working directory"
    child = state_json(child_dir)
    assert child is not None and child["status"] == "exhausted"
    assert child["budget"]["starting"] == "1"


# --- the family tree --------------------------------------------------------------------


def _record(child_id: str, state_dir: str, name: str = "Kid") -> ChildRecord:
    return ChildRecord(
        id=child_id,
        name=name,
        ticker="KID",
        state_dir=state_dir,
        created_at="2026-01-01T00:00:00Z",
        status="running",
    )


def test_the_tree_reports_children_that_never_started_or_were_withdrawn(
    tmp_path: Path, fake_child: None
) -> None:
    settings = parent_settings(tmp_path)
    being = open_parent(settings)
    try:
        started = spawn_call(being, settings, _arguments(name="Waiting", budget="1"))
        assert started.status.value == "success"
        being.state.mind.children.append(_record(str(uuid.uuid4()), "elsewhere", "Gone"))
        withdrawn = _record(str(uuid.uuid4()), "x", "Withdrawn")
        withdrawn.status = "withdrawn"
        being.state.mind.children.append(withdrawn)
        being.save()
    finally:
        being.close()
    tree = family_tree("parent")
    assert [(e["name"], e["status"], e["alive"]) for e in tree] == [
        ("Waiting", "not started", False),
        ("Gone", "not started", False),
        ("Withdrawn", "withdrawn", False),
    ]
    assert tree[0]["state_dir"] == os.path.join("parent", "children", started.content["child_id"])


def test_the_tree_text_never_writes_control_characters(tmp_path: Path, fake_child: None) -> None:
    settings = parent_settings(tmp_path)
    being = open_parent(settings)
    try:
        # A record as a hand-edited or foreign state file may hold it.
        being.state.mind.children.append(_record(str(uuid.uuid4()), "x", "Evil\x1b[2J\x07\x9b"))
        being.save()
    finally:
        being.close()
    result = CliRunner().invoke(children_command, ["--state-dir", "parent"])
    assert result.exit_code == 0, result.output
    assert "Evil" in result.output
    assert not any(ch in result.output for ch in "\x1b\x07\x9b"), repr(result.output)
    as_json = CliRunner().invoke(children_command, ["--state-dir", "parent", "--json"])
    assert json.loads(as_json.output)[0]["name"] == "Evil\x1b[2J\x07\x9b"


def test_is_alive_follows_the_lock_of_a_running_being(tmp_path: Path) -> None:
    state_dir = tmp_path / "being"
    state_dir.mkdir()
    assert not is_alive(str(state_dir))  # no lock file at all
    fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert not is_alive(str(state_dir))
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert is_alive(str(state_dir))
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert not is_alive(str(state_dir))
    finally:
        os.close(fd)


def test_looking_at_a_family_never_stops_a_being_from_booting(tmp_path: Path) -> None:
    """`children` must not take the lock a booting child needs, even for a moment."""
    state_dir = tmp_path / "being"
    state_dir.mkdir()
    (state_dir / "lock").touch()
    stop = tmp_path / "stop"
    watcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys\n"
            "from singularity.runtime.family.tree import is_alive\n"
            "is_alive(sys.argv[1])\n"
            "print('watching', flush=True)\n"
            "while not os.path.exists(sys.argv[2]):\n"
            "    is_alive(sys.argv[1])\n",
            str(state_dir),
            str(stop),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    refused, attempts = 0, 2000
    try:
        assert watcher.stdout is not None
        assert watcher.stdout.readline() == "watching\n"
        for _ in range(attempts):
            fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                refused += 1
            finally:
                os.close(fd)
        stop.touch()
        assert watcher.wait(60) == 0  # it watched the whole time
    finally:
        watcher.kill()
        watcher.wait()
    assert refused == 0, f"{refused} of {attempts} boots would have found the lock taken"
