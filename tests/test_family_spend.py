"""A family never spends more than its root had and earned (decision 17).

Two levels:

- Real processes: seeded random scripts for a root `singularity once` and every child
  and grandchild it leads to (spawns with random or default budgets, some refused, plain
  answers otherwise), all against one scripted gateway. When the family has stopped, the
  sum of `api_spent + instance_spent` over every being in the tree is at most the root's
  starting balance, each child started with exactly its funding, and each parent's
  `children_funded` is the sum of its children's grants.
- In-process, with Hypothesis: random sequences of spawns (the real tool), child boots
  (the real claim), paid calls (the real ledger, reserve then debit), earnings, and parent
  restarts (the real settle, which takes back grants nobody claimed). Money is conserved
  exactly after every step: the root's starting balance plus everything earned equals
  what the beings hold and spent plus the grants still waiting to be claimed.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from singularity.config import Settings, resolve
from singularity.errors import StateError
from singularity.money import add
from singularity.runtime import ledger
from singularity.runtime.being import LiveBeing, open_being
from singularity.runtime.family import children
from singularity.storage import funding
from singularity.testing.scripted_server import Turn
from tests.support.children_gateway import FamilyGateway, spawn_turn
from tests.support.children_inproc import spawn_call
from tests.support.children_procs import (
    being_money,
    budget_balances,
    child_dirs,
    clean_environment,
    family_reaper,
    grant_in,
    journal,
    new_tag,
    run_cli,
    state_json,
    tagged_pids,
)
from tests.support.polling import wait_for
from tests.support.reached import Reached

ROOT_FLAGS = {
    "state_dir": "root",
    "workspace": "ws",
    "agent_name": "Root",
    "starting_balance": "3",
    # Every answer reports 100 completion tokens: a call costs 0.1 USD whatever the prompt.
    "input_price": "0.01",
    "output_price": "1000",
    "instance_price": "0",
    "cycle_interval_secs": "0",
    "max_tool_rounds": "4",
    "max_tokens": "100",
    "http_timeout_secs": "20",
}
# `None` is the default funding; 9 is more than anyone in this family can spare.
BUDGETS = (None, "0.3", "0.5", "0.8", "9")
MAX_DEPTH = 3


class RandomFamily:
    """Seeded scripts: each being's answer number `n` depends only on the seed, its name, n.

    The root's first answer spawns `Root-0` with 1.5 USD, whose first answer spawns
    `Root-0-0` with the default funding: every family has a grandchild that can afford
    calls. Grandchildren spawn no further."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.depth = {"Root": 0}
        self.born: dict[str, int] = {}
        self.lock = threading.Lock()

    def plan(self, name: str, number: int) -> Turn | None:
        rng = random.Random(f"{self.seed}/{name}/{number}")
        budget = rng.choice(BUDGETS)
        if number == 0 and name in ("Root", "Root-0"):
            budget = "1.5" if name == "Root" else None
        elif rng.random() < 0.5:
            return None
        with self.lock:
            depth = self.depth.get(name)
            if depth is None or depth >= MAX_DEPTH - 1:
                return None
            child = f"{name}-{self.born.get(name, 0)}"
            self.born[name] = self.born.get(name, 0) + 1
            self.depth[child] = depth + 1
        return spawn_turn(child, "T", "spending", budget)


@dataclass
class Member:
    """One being of the family, as its directory says."""

    path: Path
    state: dict[str, Any]
    children: list[Member] = field(default_factory=list)


def _family(path: Path) -> Member:
    state = state_json(path)
    assert state is not None, f"{path} has no state"
    member = Member(path, state)
    for child in child_dirs(path):
        if (child / "state.json").exists():
            member.children.append(_family(child))
    return member


def _members(member: Member) -> Iterator[Member]:
    yield member
    for child in member.children:
        yield from _members(child)


def _check_family(root: Path) -> tuple[int, int]:
    family = _family(root)
    spent = earned = Decimal(0)
    count = deepest = 0
    for member in _members(family):
        money = being_money(member.state)
        assert budget_balances(money), f"{member.path}: {money}"
        assert money["remaining"] >= 0
        spent += money["api_spent"] + money["instance_spent"]
        earned += money["earned"]
        count += 1
        deepest = max(deepest, len(member.path.relative_to(root).parts) // 2)
        events = journal(member.path)
        funded = {
            e["child_id"]: Decimal(e["amount"]) for e in events if e["type"] == "child_funded"
        }
        refunded = {e["child_id"] for e in events if e["type"] == "child_refunded"}
        outstanding = Decimal(0)
        for child_dir in child_dirs(member.path):
            if child_dir.name in refunded:
                continue
            outstanding += funded[child_dir.name]
            child_state = state_json(child_dir)
            claimed = grant_in(child_dir, funding.CLAIMED)
            if child_state is not None:
                # Each child started with exactly what its parent gave it.
                assert claimed is not None
                assert Decimal(child_state["budget"]["starting"]) == funded[child_dir.name]
                assert claimed.amount == funded[child_dir.name]
        assert money["children_funded"] == outstanding
    root_money = being_money(family.state)
    assert spent <= root_money["starting"] + earned, (spent, root_money, earned)
    assert spent > 0
    return count, deepest


@dataclass
class FamilyRun:
    root: Path
    gateway_counts: dict[str, int]
    grandchildren: dict[str, int]
    """Each grandchild's name and the cycles it lived."""


def _live_family(root: Path, seed: int) -> FamilyRun:
    (root / "ws").mkdir()
    family = RandomFamily(seed)
    tag = new_tag()
    env = clean_environment(tag)
    with FamilyGateway(family.plan, completion_tokens=100) as gateway, family_reaper(tag):
        flags = {**ROOT_FLAGS, "brama_url": gateway.url}
        result = run_cli("once", flags, env=env, cwd=root, log=root / "family.log")
        assert result.returncode == 0, (root / "family.log").read_text()[-3000:]
        wait_for(lambda: not tagged_pids(tag), "the family to stop", timeout=150)
        counts = dict(gateway.counts)
    grandchildren = {
        state["identity"]["name"]: state["cycle"]
        for child in child_dirs(root / "root")
        for grandchild in child_dirs(child)
        if (state := state_json(grandchild)) is not None
    }
    return FamilyRun(root, counts, grandchildren)


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory: pytest.TempPathFactory) -> list[FamilyRun]:
    runs = []
    for seed in (3, 8):
        root = tmp_path_factory.mktemp(f"family{seed}")
        previous = os.getcwd()
        os.chdir(root)  # relative state directories keep the import sockets' paths short
        try:
            runs.append(_live_family(root, seed))
        finally:
            os.chdir(previous)
    return runs


def test_a_family_never_spends_more_than_its_root_had(family_runs: list[FamilyRun]) -> None:
    deepest = 0
    for run in family_runs:
        count, depth = _check_family(run.root / "root")
        assert count >= 3, f"the family of {run.root} is too small to prove anything"
        deepest = max(deepest, depth)
    assert deepest >= 2, "no grandchild was born"


def test_a_funded_grandchild_lives_cycles(family_runs: list[FamilyRun]) -> None:
    for run in family_runs:
        assert run.grandchildren.get("Root-0-0", 0) >= 1, run.grandchildren


# --- the money rule in-process, with Hypothesis --------------------------------------


@dataclass
class Being:
    settings: Settings
    live: LiveBeing | None
    children: list[str] = field(default_factory=list)


class Family:
    """Beings in one directory tree, driven by the real spawn tool, claim, ledger, settle."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.beings: dict[str, Being] = {}
        self.unborn: dict[str, Path] = {}  # name -> directory of a funded, unclaimed child
        self.went: list[str] = []  # the situations the steps went through
        root = self._settings("root", "Root")
        self.beings["Root"] = Being(root, self._open(root, resume=False))
        self.counter = 0

    def _settings(self, state_dir: str, name: str) -> Settings:
        return resolve(
            {
                "state_dir": state_dir,
                "workspace": "ws",
                "agent_name": name,
                "starting_balance": "2",
            },
            environ={},
        )

    @staticmethod
    def _open(settings: Settings, *, resume: bool) -> LiveBeing:
        being = open_being(settings, resume=resume)
        ledger.reconcile(being, being.events_at_open)
        children.settle_unstarted_children(being, settings)
        being.save()
        return being

    def alive(self) -> list[str]:
        return sorted(name for name, being in self.beings.items() if being.live is not None)

    def live(self, name: str) -> LiveBeing:
        being = self.beings[name].live
        assert being is not None
        return being

    def spawn(self, name: str, budget: str | None) -> None:
        being = self.beings[name]
        arguments = {"name": f"B{self.counter}", "ticker": "B", "specialty": "s"}
        if budget is not None:
            arguments["budget"] = budget
        outcome = spawn_call(self.live(name), being.settings, arguments)
        if outcome.status.value == "success":
            child_dir = Path(being.settings.state_dir, "children", outcome.content["child_id"])
            self.unborn[arguments["name"]] = child_dir
            being.children.append(arguments["name"])
            self.counter += 1
            self.went.append("spawned" if name == "Root" else "grandchild spawned")
        else:
            assert outcome.error_code == "child_funding", outcome
            self.went.append("refused")

    def boot(self, child: str) -> None:
        path = self.unborn.pop(child)
        settings = self._settings(str(path), child)
        try:
            self.beings[child] = Being(settings, self._open(settings, resume=False))
            self.went.append("claimed")
        except StateError:
            assert (path / funding.REVOKED).exists()  # its parent took the grant back
            self.went.append("revoked")

    def spend(self, name: str, api: Decimal, instance: Decimal) -> None:
        being = self.live(name)
        operation = ledger.new_operation_id()
        charge = ledger.Charge(api, instance, 10)
        ledger.reserve(being, operation, charge)
        ledger.debit(being, operation, charge)
        being.save()
        self.went.append("spent")

    def earn(self, name: str, amount: Decimal) -> None:
        budget = self.live(name).state.budget
        budget.earned = add(budget.earned, amount)
        budget.remaining = add(budget.remaining, amount)
        self.live(name).save()
        self.went.append("earned")

    def restart(self, name: str) -> None:
        being = self.beings[name]
        self.live(name).close()
        being.live = self._open(being.settings, resume=True)
        self.went.append("restarted")

    def close(self) -> None:
        for being in self.beings.values():
            if being.live is not None:
                being.live.close()
                being.live = None

    def check(self) -> None:
        held = spent = earned = Decimal(0)
        for name, being in self.beings.items():
            budget = self.live(name).state.budget
            assert budget.remaining >= 0, name
            assert (
                budget.starting
                + budget.earned
                - budget.api_spent
                - budget.instance_spent
                - budget.children_funded
            ) == budget.remaining, name
            held += budget.remaining
            spent += budget.api_spent + budget.instance_spent
            earned += budget.earned
            for child in being.children:
                if child in self.beings:
                    assert self.live(child).state.budget.starting == grant_of(
                        self.beings[child].settings
                    )
        waiting = Decimal(0)
        for path in self.unborn.values():
            grant = grant_in(path, funding.GRANT)
            waiting += grant.amount if grant is not None else Decimal(0)
        root = self.live("Root").state.budget
        assert spent <= root.starting + earned
        assert held + spent + waiting == root.starting + earned


def grant_of(settings: Settings) -> Decimal:
    claimed = grant_in(Path(settings.state_dir), funding.CLAIMED)
    assert claimed is not None
    return claimed.amount


amounts = st.decimals(min_value=Decimal("0.000000000001"), max_value=Decimal("3"), places=12)
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("spawn"),
            st.integers(0, 50),
            st.sampled_from([None, "0.5", "1", "1.5", "3", "0.000000000001"]),
        ),
        st.tuples(st.just("boot"), st.integers(0, 50), st.none()),
        st.tuples(st.just("spend"), st.integers(0, 50), st.tuples(amounts, amounts)),
        st.tuples(st.just("earn"), st.integers(0, 50), amounts),
        st.tuples(st.just("restart"), st.integers(0, 50), st.none()),
    ),
    max_size=30,
)


def test_family_money_is_conserved_whatever_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    reached = Reached(
        "spawned",
        "grandchild spawned",
        "refused",
        "claimed",
        "revoked",
        "spent",
        "earned",
        "restarted",
    )
    monkeypatch.setattr(children, "child_command", lambda: ["/bin/true"])

    @settings(max_examples=60)
    @example([("spawn", 0, "1"), ("restart", 0, None), ("boot", 0, None)])
    @given(operations)
    def steps_of_one_family(steps: list[tuple[str, int, Any]]) -> None:
        previous = os.getcwd()
        with tempfile.TemporaryDirectory() as base:
            os.chdir(base)
            Path(base, "ws").mkdir()
            family = Family(Path(base))
            try:
                for action, pick, value in steps:
                    names = family.alive()
                    name = names[pick % len(names)]
                    if action == "spawn":
                        family.spawn(name, value)
                    elif action == "boot" and family.unborn:
                        unborn = sorted(family.unborn)
                        family.boot(unborn[pick % len(unborn)])
                    elif action == "spend":
                        family.spend(name, *value)
                    elif action == "earn":
                        family.earn(name, value)
                    elif action == "restart":
                        family.restart(name)
                    family.check()
            finally:
                family.close()
                os.chdir(previous)
            reached.note(*family.went)

    steps_of_one_family()
    reached.assert_all()
