"""Crash safety of a living, paying being: SIGKILL a real `singularity run` hundreds of times.

A being with non-zero prices lives tool-heavy cycles (memories, workspace file writes, cycle
ends, gateway outages) against one scripted gateway served from this process, with no pause
between cycles. Its process is killed with SIGKILL at a random moment after it reached its
state, then the being is resumed in-process (`Runtime.boot`, which reconciles, then
`shutdown`) and checked:

- `verify_state_dir` finds no problem (no temp file, journal and budget agree, every
  reservation settled, the archive matches the state);
- the budget reflects exactly the journaled `cost_debited` operations, each once and none
  lost (an independent replay, `support/loop_crash_ledger.py`), `remaining >= 0`, and
  starting + earned − api_spent − instance_spent − children_funded == remaining;
- the journal only grew (every event seen before, every debit, is still there);
- every workspace file holds a whole version, never older than the one seen before.

Small balances make beings run out of money along the way; an exhausted being is checked
like the others and followed by a new one in a fresh state directory.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from singularity.config import resolve
from singularity.domain.state import AgentState
from singularity.runtime.lifecycle import Runtime
from singularity.runtime.verify import verify_state_dir
from singularity.storage.activity import read_events
from singularity.storage.fsio import open_dir
from singularity.storage.statedir import peek_state
from singularity.testing.scripted_server import ScriptedServer
from tests.support.loop_crash_ledger import debit_ids, ledger_problems
from tests.support.loop_crash_scenario import FILES, file_version, turns

DEFAULT_KILLS = 200
SLOW_KILLS = 1000
# Seconds a process lives after its first journal append before it is killed: uniform up to this.
MAX_LIFE_SECS = 0.25
# Seconds to wait for a process to reach its state (startup is ~0.6 s of CPU; CI may be loaded).
START_TIMEOUT_SECS = 60.0
# Non-zero prices (USD per million tokens, per hour); instance time divides by 3.6e12 ns.
PRICES = {"input_price": "2.5", "output_price": "10", "instance_price": "3"}
# A balance a being spends in a few dozen kills, so several run out during the loop.
STARTING_BALANCE = "1.5"
LOOP_SETTINGS = {
    **PRICES,
    "starting_balance": STARTING_BALANCE,
    "cycle_interval_secs": "0",
    "max_tool_rounds": "8",
    "max_tokens": "512",
    "context_tokens": "2048",
    "http_timeout_secs": "5",
}
SCRIPT_CHUNK = 400
FOREIGN_ENV = ("SINGULARITY_", "BRAMA_", "LAS_", "MOST_", "WISENT_")


def _forget_requests(server: ScriptedServer) -> None:
    """Drop the requests the server recorded (bodies of ~10 KB each) so memory stays flat."""
    with server._lock:
        server._requests.clear()


def _clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_ENV)}


def _journal_size(state_dir: Path) -> int:
    try:
        return (state_dir / "activity.jsonl").stat().st_size
    except FileNotFoundError:
        return 0


@dataclass
class CrashLoop:
    """One loop of kills against a scripted gateway; beings follow each other when exhausted."""

    root: Path
    server: ScriptedServer
    rng: random.Random
    generation: int = 0
    scripted: int = 0
    kills: int = 0
    exhausted: int = 0
    journal: bytes = b""
    debits: set[str] = field(default_factory=set)
    versions: dict[str, int] = field(default_factory=dict)

    @property
    def state_dir(self) -> Path:
        return self.root / f"being-{self.generation}"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    def settings_flags(self) -> dict[str, str]:
        return {
            **LOOP_SETTINGS,
            "state_dir": str(self.state_dir),
            "workspace": str(self.workspace),
            "brama_url": self.server.url,
        }

    def feed(self) -> None:
        """Keep plenty of script ahead of the being."""
        while self.server.remaining < SCRIPT_CHUNK:
            self.server.add(*turns(self.scripted, SCRIPT_CHUNK))
            self.scripted += SCRIPT_CHUNK

    def live_until_killed(self) -> int | None:
        """Run the being, SIGKILL it a random while after it reached its state; its exit code."""
        resume = (self.state_dir / "state.json").exists()
        argv = [sys.executable, "-m", "singularity", "run"]
        for name, value in self.settings_flags().items():
            argv += ["--" + name.replace("_", "-"), value]
        argv += ["--resume"] if resume else []
        before = _journal_size(self.state_dir)
        log_path = self.root / "run.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=_clean_environment(),
                cwd=self.root,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while _journal_size(self.state_dir) == before and process.poll() is None:
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise AssertionError("the being never reached its state")
            time.sleep(0.002)
        if process.poll() is None:
            time.sleep(self.rng.uniform(0, MAX_LIFE_SECS))
            process.send_signal(signal.SIGKILL)
        code = process.wait()
        if code == -signal.SIGKILL:
            self.kills += 1
            return None
        if code != 0:
            raise AssertionError(f"`run` exited {code}: {log_path.read_text()[-2000:]}")
        return code

    def resume(self) -> AgentState:
        """Boot the killed being in-process (the resume reconciles), then shut it down."""
        flags: dict[str, object] = {**self.settings_flags()}
        flags["resume"] = (self.state_dir / "state.json").exists()
        runtime = Runtime.boot(resolve(flags, environ={}))
        asyncio.run(runtime.shutdown())
        state = peek_state(str(self.state_dir))
        assert state is not None
        return state

    def check(self, state: AgentState, label: str) -> None:
        problems = verify_state_dir(str(self.state_dir))
        assert problems == [], f"{label}: verify: {problems}"
        data = (self.state_dir / "activity.jsonl").read_bytes()
        assert data.startswith(self.journal), f"{label}: the journal lost or changed events"
        self.journal = data
        dir_fd = open_dir(self.state_dir)
        try:
            journal = read_events(dir_fd)
        finally:
            os.close(dir_fd)
        problems = ledger_problems(state, journal)
        assert problems == [], f"{label}: ledger: {problems}"
        debits = debit_ids(journal)
        assert self.debits <= set(debits), f"{label}: debits lost: {self.debits - set(debits)}"
        self.debits = set(debits)
        self._check_workspace(label)
        temps = [p for p in (*self.state_dir.iterdir(), *self.workspace.rglob("*.tmp"))
                 if p.name.endswith(".tmp")]
        assert temps == [], f"{label}: temp files left: {temps}"

    def _check_workspace(self, label: str) -> None:
        for name in FILES:
            path = self.workspace / name
            if not path.exists():
                continue
            version = file_version(path.read_text())
            assert version is not None, f"{label}: {name} holds a torn or foreign text"
            assert version >= self.versions.get(name, -1), f"{label}: {name} went back"
            self.versions[name] = version

    def next_generation(self) -> None:
        self.generation += 1
        self.exhausted += 1
        self.journal = b""
        self.debits = set()

    def run(self, kills: int) -> None:
        self.workspace.mkdir()
        while self.kills < kills:
            self.feed()
            _forget_requests(self.server)
            code = self.live_until_killed()
            label = f"being {self.generation}, kill {self.kills}"
            state = self.resume()
            self.check(state, label)
            if code is not None:
                assert state.status == "exhausted", f"{label}: `run` ended while solvent"
                self.next_generation()


def _crash_loop(tmp_path: Path, kills: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./singularity.toml is read by the in-process boot
    with ScriptedServer(default=None) as server:
        loop = CrashLoop(tmp_path, server, random.Random(seed))
        loop.run(kills)
        assert server.errors == []
    assert loop.exhausted >= 1, "no being ran out of money: the loop proves less than it should"


@pytest.mark.timeout(1200)
def test_sigkill_a_paying_being_never_loses_or_doubles_a_debit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _crash_loop(tmp_path, DEFAULT_KILLS, seed=20261130, monkeypatch=monkeypatch)


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_sigkill_a_paying_being_a_thousand_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _crash_loop(tmp_path, SLOW_KILLS, seed=11, monkeypatch=monkeypatch)
