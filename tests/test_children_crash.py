"""SIGKILL a parent around its spawns: funded money is never left in limbo (decision 17).

A real `singularity run` parent, scripted to spawn a child with a small budget every other
model round, is killed with SIGKILL at random moments: most kills land within a few
milliseconds after a new `children/<uuid>` directory appeared (while the grant is written,
the transfer journaled and the child started), the others anywhere in its life. Sometimes
the children get a head start to claim their grants before the parent resumes. After each
kill the parent is resumed (`Runtime.boot` with `--resume`: reconcile, then settle its
children) and checked:

- `verify` finds nothing wrong, and starting + earned − spent − children funded == remaining;
- no grant is left unclaimed: each child directory holds a claimed or a revoked grant;
- children funded == the sum of the grants claimed in the child directories, and every
  journaled `child_funded` is either claimed (same operation and amount) or refunded;
- every claimed grant belongs to a journaled `child_funded`: no money from nowhere.

Each child is a real `singularity run` too; all of them are killed after each round.
A deterministic sweep kills the parent at every persistence step of one spawn as well.
The parent processes are forked from an interpreter that imported the program once
(`support/children_zygote.py`), so a life costs milliseconds of start-up, not a second,
and two parents (in their own directories) are killed side by side, half the kills each.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.errors import StateLockedError
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.runtime.loop.lifecycle import Runtime
from singularity.storage import funding
from singularity.testing.scripted_server import Turn
from tests.support.children_gateway import FamilyGateway, spawn_turn
from tests.support.children_procs import (
    being_money,
    budget_balances,
    child_dirs,
    clean_environment,
    grant_in,
    journal,
    kill_tagged,
    new_tag,
    state_json,
    tagged_pids,
)
from tests.support.polling import DEFAULT_TIMEOUT, wait_for
from tests.support.zygote import Zygote

DEFAULT_KILLS = 16
SLOW_KILLS = 400
BUDGETS = ("0.01", "0.02", "0.05", "0.1")
HEAD_START = 0.06
FLAGS = {
    "state_dir": "parent",
    "workspace": "ws",
    "agent_name": "Crash",
    "agent_ticker": "CR",
    # Every answer reports 64 completion tokens: a call costs 0.0064 USD whatever the prompt.
    "input_price": "0.01",
    "output_price": "100",
    "instance_price": "0",
    "starting_balance": "100",
    "cycle_interval_secs": "0",
    "max_tool_rounds": "8",
    "max_tokens": "64",
    "context_tokens": "2048",
    "http_timeout_secs": "10",
}


def lane_flags(lane: str) -> dict[str, str]:
    """The parent of one lane of the crash loop, under `<lane>/parent`."""
    return {**FLAGS, "state_dir": f"{lane}/parent", "agent_name": f"Crash{lane}"}


def _argv(flags: dict[str, str], resume: bool) -> list[str]:
    argv = ["run"]
    for name, value in flags.items():
        argv += ["--" + name.replace("_", "-"), value]
    return argv + (["--resume"] if resume else [])


def _lock_holders(state_dir: Path) -> list[str]:
    info = (state_dir / "lock").stat()
    key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    holders = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if key in fields:
            pid = fields[fields.index(key) - 1]
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                command = b"?"
            holders.append(f"{pid}: {command.decode(errors='replace')[:200]}")
    return holders


def _resume(flags: dict[str, str], server_url: str, retry_secs: float = DEFAULT_TIMEOUT) -> None:
    """Boot the parent with --resume and shut it down.

    A parent killed while starting a child can leave the lock with the half-started child
    for a moment (between its fork and its exec, before it closes the inherited lock)."""
    settings = resolve({**flags, "brama_url": server_url, "resume": True}, environ={})
    deadline = time.monotonic() + retry_secs
    while True:
        try:
            runtime = Runtime.boot(settings)
            break
        except StateLockedError:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the lock stays taken: {_lock_holders(Path(settings.state_dir))}"
                ) from None
            time.sleep(0.01)
    asyncio.run(runtime.shutdown())


def check_money(parent_dir: Path, label: str) -> Counter[str]:
    """Every invariant of the family's money after a resume; counts of each grant's fate."""
    problems = verify_state_dir(str(parent_dir))
    assert problems == [], f"{label}: verify: {problems}"
    state = state_json(parent_dir)
    assert state is not None
    money = being_money(state)
    assert budget_balances(money), f"{label}: the parent's budget does not balance: {money}"
    events = journal(parent_dir)
    funded = {e["child_id"]: e for e in events if e["type"] == "child_funded"}
    refunded = {e["child_id"]: e for e in events if e["type"] == "child_refunded"}
    assert set(refunded) <= set(funded), f"{label}: a refund without a funding"
    fates: Counter[str] = Counter()
    claimed_total = Decimal(0)
    dirs = {path.name: path for path in child_dirs(parent_dir)}
    for child_id, path in dirs.items():
        assert grant_in(path, funding.GRANT) is None, f"{label}: {child_id} grant in limbo"
        claimed = grant_in(path, funding.CLAIMED)
        revoked = grant_in(path, funding.REVOKED)
        if claimed is not None:
            event = funded.get(child_id)
            assert event is not None, f"{label}: {child_id} claimed money never journaled"
            assert child_id not in refunded, f"{label}: {child_id} claimed and refunded"
            assert (claimed.amount, claimed.operation_id) == (
                Decimal(event["amount"]),
                event["operation_id"],
            ), f"{label}: {child_id} claimed another amount than was funded"
            claimed_total += claimed.amount
            fates["claimed"] += 1
        elif revoked is not None:
            fates["refunded" if child_id in funded else "never journaled"] += 1
            if child_id in funded:
                assert child_id in refunded, f"{label}: {child_id} revoked, not refunded"
        else:
            fates["no grant"] += 1  # killed before the grant was written
            assert child_id not in funded, f"{label}: {child_id} funded without a grant"
    for child_id in funded:
        assert child_id in refunded or child_id in dirs, (
            f"{label}: {child_id} was funded, its directory is gone and nothing came back"
        )
    assert money["children_funded"] == claimed_total, (
        f"{label}: children funded {money['children_funded']}, claimed {claimed_total}"
    )
    return fates


def _plan(parent: str, rng_seed: int) -> Any:
    lock = threading.Lock()
    counter = iter(range(1 << 30))

    def plan(name: str, number: int) -> Turn | None:
        if name != parent or number % 2:
            return None  # children, and every other round of the parent: a plain answer
        with lock:
            index = next(counter)
        budget = BUDGETS[(index + rng_seed) % len(BUDGETS)]
        return spawn_turn(f"{parent}-{index}", "K", "being killed", budget)

    return plan


def _unclaimed(parent_dir: Path) -> bool:
    return any((path / funding.GRANT).exists() for path in child_dirs(parent_dir))


def _crash_lane(base: Path, lane: str, kills: int, seed: int) -> Counter[str]:
    """Kill one parent `kills` times; the fates of its grants at the end."""
    rng = random.Random(seed)
    flags = lane_flags(lane)
    parent_dir = base / flags["state_dir"]
    log = base / f"{lane}.log"
    tag = new_tag()
    env = clean_environment(tag)
    zygote = Zygote()
    fates: Counter[str] = Counter()
    killed = 0
    try:
        with FamilyGateway(_plan(flags["agent_name"], seed), completion_tokens=64) as gateway:
            while killed < kills:
                resume = (parent_dir / "state.json").exists()
                before = len(child_dirs(parent_dir))
                pid = zygote.start(
                    [*_argv(flags, resume), "--brama-url", gateway.url], base, env, log
                )
                # Most kills land within milliseconds of a new child directory (the grant,
                # the journal, the start); the others a while after a spawn began. The
                # first and the middle life end as soon as a child process runs, and its
                # children then get a head start (so that some grants are surely claimed).
                started_child = killed in (0, kills // 2)
                near_spawn = not started_child and rng.random() < 0.6
                target = before + (rng.choice((1, 1, 2)) if near_spawn else 1)
                delay = rng.uniform(0, 0.03) if near_spawn else rng.uniform(0.03, 0.3)
                if started_child:
                    wait_for(lambda: bool(tagged_pids(tag)), "a child process")
                else:
                    wait_for(
                        lambda: len(child_dirs(parent_dir)) >= target,  # noqa: B023
                        "the parent to spawn",
                    )
                    time.sleep(delay)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                status = zygote.wait(pid)
                if status != -signal.SIGKILL:
                    tail = log.read_text()[-3000:]
                    raise AssertionError(f"the parent ended on its own ({status}): {tail}")
                killed += 1
                if started_child or rng.random() < HEAD_START:
                    # Children boot and claim before their parent resumes (or die trying).
                    wait_for(
                        lambda: not _unclaimed(parent_dir) or not tagged_pids(tag),
                        "children to claim",
                    )
                _resume(flags, gateway.url)
                fates = check_money(parent_dir, f"lane {lane}, kill {killed}")
                kill_tagged(tag)
            # A parent killed mid-request leaves the server writing to a closed socket.
            assert [e for e in gateway.errors if not isinstance(e, ConnectionError)] == []
    finally:
        kill_tagged(tag)
        zygote.close()
    return fates


def _crash_loop(base: Path, kills: int, seed: int, lanes: int = 2) -> Counter[str]:
    """`kills` kills in all, shared by parents killed side by side."""
    (base / "ws").mkdir()
    with concurrent.futures.ThreadPoolExecutor(lanes) as pool:
        futures = [
            pool.submit(_crash_lane, base, chr(ord("a") + index), -(-kills // lanes), seed + index)
            for index in range(lanes)
        ]
        fates: Counter[str] = Counter()
        for future in futures:
            fates += future.result()
    # The run proves little unless grants met each fate.
    assert fates["claimed"] >= 1 and fates["refunded"] >= 1, fates
    return fates


@pytest.mark.timeout(600)
def test_sigkill_around_spawns_never_leaves_money_in_limbo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _crash_loop(tmp_path, DEFAULT_KILLS, seed=17)


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_sigkill_around_spawns_hundreds_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _crash_loop(tmp_path, SLOW_KILLS, seed=4242)


# --- every persistence step of one spawn ----------------------------------------------

# The steps of a spawn with both raw credentials set, in order: the grant, two secret
# files, the step that journals `child_funded` (its record in `state.redo`, then its line
# in `activity.jsonl`), durable before the child starts, and the step of the tool's
# outcome, after the child started.
SPAWN_STEPS = [
    "funding.write@1",
    "funding.fsync@1",
    "funding.rename@1",
    "funding.dirsync@1",
    "funding.write@2",
    "funding.dirsync@2",
    "funding.write@3",
    "funding.dirsync@3",
    "redo.write@1",
    "redo.fsync@1",
    "activity.write@1",
    "redo.write@2",
    "redo.fsync@2",
    "activity.write@2",
]


@pytest.fixture(scope="module")
def zygote() -> Any:
    starter = Zygote()
    yield starter
    starter.close()


@pytest.mark.parametrize("step", SPAWN_STEPS)
def test_a_kill_at_each_step_of_a_spawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, zygote: Zygote
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    name, _, nth = step.partition("@")
    flags = {**FLAGS, "brama_url": "http://127.0.0.1:9"}
    document = {
        "flags": flags,
        "secrets": {"WISENT_APP_AGENT_AUTH_SECRET": "s", "BRAMA_API_KEY": "k"},
        "child_command": ["/bin/true"],
        "arguments": {"name": "Kid", "ticker": "K", "specialty": "t", "budget": "3"},
    }
    log = tmp_path / "worker.log"
    pid = zygote.start(
        ["--worker", "spawn", f"{name}=kill@{nth}", json.dumps(document)],
        tmp_path,
        dict(os.environ),
        log,
    )
    assert zygote.wait(pid) == -signal.SIGKILL, log.read_text()[-2000:]
    _resume(flags, flags["brama_url"])
    fates = check_money(tmp_path / "parent", step)
    state = state_json(tmp_path / "parent")
    assert state is not None
    money = being_money(state)
    # `/bin/true` never claims: whatever moved came back.
    assert money["remaining"] == Decimal(100) and money["children_funded"] == 0
    assert fates["claimed"] == 0
    for path in child_dirs(tmp_path / "parent"):
        leftovers = {p.name for p in path.iterdir()} - {funding.REVOKED}
        assert leftovers == set(), f"{step}: {path.name} keeps {leftovers}"
