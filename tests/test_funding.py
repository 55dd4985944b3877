"""The funding grant (decision 17): claim by rename, revoke by rename, whichever wins owns it.

Unit tests of `storage/funding.py`, a claim/revoke race, and the two crashes right after a
rename: a child that claimed but died before saving its state, and a parent that revoked
but died before journaling the refund. Neither may lose or duplicate the money.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.errors import FatalIoError, StateError
from singularity.runtime.family import children
from singularity.runtime.loop.lifecycle import Runtime
from singularity.storage import fsio, funding
from tests.support.children_inproc import open_parent, parent_settings, spawn_call
from tests.support.children_procs import (
    being_money,
    budget_balances,
    grant_in,
    journal,
    state_json,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def child_dir(tmp_path: Path) -> Any:
    path = tmp_path / "child"
    path.mkdir(mode=0o700)
    dir_fd = fsio.open_dir(path)
    yield dir_fd
    os.close(dir_fd)


GRANT = funding.Grant("c0ffee00-0000-4000-8000-000000000001", Decimal("1.25"), "op-1")


def test_a_grant_is_written_private_and_read_back_exactly(tmp_path: Path, child_dir: int) -> None:
    funding.write_grant(child_dir, GRANT)
    info = (tmp_path / "child" / funding.GRANT).stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert json.loads((tmp_path / "child" / funding.GRANT).read_text()) == {
        "child_id": GRANT.child_id,
        "amount": "1.25",
        "operation_id": "op-1",
    }
    assert sorted(os.listdir(tmp_path / "child")) == [funding.GRANT]  # no temp left


def test_a_claimed_grant_cannot_be_revoked(tmp_path: Path, child_dir: int) -> None:
    funding.write_grant(child_dir, GRANT)
    assert funding.claim(child_dir) == GRANT
    assert funding.revoke(child_dir) is None
    assert sorted(os.listdir(tmp_path / "child")) == [funding.CLAIMED]


def test_a_revoked_grant_cannot_be_claimed(tmp_path: Path, child_dir: int) -> None:
    funding.write_grant(child_dir, GRANT)
    assert funding.revoke(child_dir) == GRANT
    with pytest.raises(StateError, match="withdrawn"):
        funding.claim(child_dir)
    assert sorted(os.listdir(tmp_path / "child")) == [funding.REVOKED]


def test_no_grant_means_nothing_to_claim_or_revoke(child_dir: int) -> None:
    assert funding.claim(child_dir) is None
    assert funding.revoke(child_dir) is None


def test_claim_and_revoke_are_idempotent(child_dir: int, tmp_path: Path) -> None:
    # A process can die right after its rename: doing it again must give the same answer.
    funding.write_grant(child_dir, GRANT)
    assert funding.claim(child_dir) == GRANT
    assert funding.claim(child_dir) == GRANT
    other = tmp_path / "other"
    other.mkdir()
    other_fd = fsio.open_dir(other)
    try:
        funding.write_grant(other_fd, GRANT)
        assert funding.revoke(other_fd) == GRANT
        assert funding.revoke(other_fd) == GRANT
    finally:
        os.close(other_fd)


@pytest.mark.parametrize(
    "content", [b"{", b"{}", b'{"child_id":"x","amount":"NaN","operation_id":"o"}']
)
def test_an_unreadable_grant_is_fatal(tmp_path: Path, child_dir: int, content: bytes) -> None:
    (tmp_path / "child" / funding.GRANT).write_bytes(content)
    with pytest.raises(FatalIoError, match="cannot claim"):
        funding.claim(child_dir)


def test_claim_and_revoke_race_and_exactly_one_wins(tmp_path: Path) -> None:
    outcomes = {"claimed": 0, "revoked": 0}
    for trial in range(200):
        path = tmp_path / f"c{trial}"
        path.mkdir()
        claim_fd, revoke_fd = fsio.open_dir(path), fsio.open_dir(path)
        funding.write_grant(claim_fd, GRANT)
        barrier = threading.Barrier(2)
        results: dict[str, object] = {}

        def claimer(
            fd: int = claim_fd, box: dict[str, object] = results, gate: threading.Barrier = barrier
        ) -> None:
            gate.wait()
            try:
                box["claim"] = funding.claim(fd)
            except StateError:
                box["claim"] = "withdrawn"

        def revoker(
            fd: int = revoke_fd, box: dict[str, object] = results, gate: threading.Barrier = barrier
        ) -> None:
            gate.wait()
            box["revoke"] = funding.revoke(fd)

        threads = [threading.Thread(target=claimer), threading.Thread(target=revoker)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        os.close(claim_fd)
        os.close(revoke_fd)
        names = sorted(os.listdir(path))
        if results["claim"] == GRANT:
            assert results["revoke"] is None and names == [funding.CLAIMED]
            outcomes["claimed"] += 1
        else:
            assert results["claim"] == "withdrawn"
            assert results["revoke"] == GRANT and names == [funding.REVOKED]
            outcomes["revoked"] += 1
    assert sum(outcomes.values()) == 200


# --- crashes right after a rename, with real processes ------------------------------


def _worker(mode: str, failpoints: str, document: dict[str, Any], cwd: Path) -> int:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.children_worker",
            mode,
            failpoints,
            json.dumps(document),
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode in (0, -9), result.stderr.decode()[-3000:]
    return result.returncode


def _resume(flags: dict[str, str]) -> None:
    runtime = Runtime.boot(resolve({**flags, "resume": True}, environ={}))
    asyncio.run(runtime.shutdown())


FLAGS = {"state_dir": "parent", "workspace": "ws", "agent_name": "Parent", "starting_balance": "10"}


def _spawn_unclaimed(tmp_path: Path) -> tuple[str, Path]:
    """A parent with one funded child (2 USD) that never started."""
    (tmp_path / "ws").mkdir()
    code = _worker(
        "spawn",
        "",
        {
            "flags": FLAGS,
            "child_command": ["/bin/true"],
            "arguments": {"name": "Kid", "ticker": "KID", "specialty": "t", "budget": "2"},
        },
        tmp_path,
    )
    assert code == 0
    [child] = (tmp_path / "parent" / "children").iterdir()
    return child.name, child


def test_a_parent_killed_after_revoking_still_gets_the_refund(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    child_id, child = _spawn_unclaimed(tmp_path)
    assert grant_in(child, funding.GRANT) is not None
    # The resumed parent revokes the unclaimed grant and is killed before its journal says so.
    assert (
        _worker("boot", "funding.dirsync=kill", {"flags": {**FLAGS, "resume": "true"}}, tmp_path)
        == -9
    )
    assert (child / funding.REVOKED).exists()
    assert [e["type"] for e in journal(tmp_path / "parent")].count("child_refunded") == 0
    _resume(FLAGS)
    events = journal(tmp_path / "parent")
    [refund] = [e for e in events if e["type"] == "child_refunded"]
    assert (refund["child_id"], refund["amount"]) == (child_id, "2")
    parent = state_json(tmp_path / "parent")
    assert parent is not None
    money = being_money(parent)
    assert money["remaining"] == Decimal(10) and money["children_funded"] == 0
    assert budget_balances(money)
    # A second resume changes nothing more.
    _resume(FLAGS)
    assert [e["type"] for e in journal(tmp_path / "parent")].count("child_refunded") == 1
    [record] = parent["mind"]["children"]
    assert (record["id"], record["status"]) == (child_id, "withdrawn")


def test_a_child_killed_after_claiming_keeps_exactly_its_grant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _, child = _spawn_unclaimed(tmp_path)
    child_flags = {
        "state_dir": os.path.relpath(child, tmp_path),
        "workspace": "ws",
        "agent_name": "Kid",
        "starting_balance": "10",
    }
    # The child claims, then dies before its first state save.
    assert _worker("boot", "funding.dirsync=kill", {"flags": child_flags}, tmp_path) == -9
    assert (child / funding.CLAIMED).exists() and not (child / "state.json").exists()
    # The parent resumes meanwhile: the grant is claimed, it stays with the child.
    _resume(FLAGS)
    parent = state_json(tmp_path / "parent")
    assert parent is not None
    assert being_money(parent)["children_funded"] == Decimal(2)
    # The child's next first boot starts with its grant, not the configured 10 USD.
    runtime = Runtime.boot(resolve(child_flags, environ={}))
    asyncio.run(runtime.shutdown())
    state = state_json(child)
    assert state is not None
    assert Decimal(state["budget"]["starting"]) == Decimal(2)
    assert Decimal(state["budget"]["remaining"]) == Decimal(2)


def test_a_secret_file_of_a_child_that_never_started_is_removed_with_its_grant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(children, "child_command", lambda: ["/bin/true"])
    settings = parent_settings(tmp_path, secrets={"WISENT_APP_AGENT_AUTH_SECRET": "canary"})
    being = open_parent(settings)
    try:
        outcome = spawn_call(being, settings, {"name": "Kid", "ticker": "K", "specialty": "t"})
    finally:
        being.close()
    child = tmp_path / "parent" / "children" / outcome.content["child_id"]
    secret = child / "brama-hmac.secret"
    assert secret.read_text() == "canary"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    _resume(
        {"state_dir": "parent", "workspace": "ws", "agent_name": "parent", "starting_balance": "10"}
    )
    assert sorted(p.name for p in child.iterdir()) == [funding.REVOKED]
