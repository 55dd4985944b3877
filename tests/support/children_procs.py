"""Real beings in real processes for the child tests: start them, read them, find and kill them.

A child being runs in its own session and outlives the parent that started it, so the test
cannot reach it through `Popen`. Every parent a test starts carries a random `CHILDREN_TAG`
in its environment; children inherit their parent's whole environment (spec §14), so
every descendant carries it too, and `kill_tagged` finds them all through `/proc`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from singularity.storage import funding
from singularity.storage.activity import Event, read_events
from singularity.storage.fsio import open_dir
from tests.support import commands

TAG = "CHILDREN_TAG"
CHILDREN = "children"


def new_tag() -> str:
    """A fresh tag for one test's family of processes."""
    return uuid.uuid4().hex


def clean_environment(tag: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without configuration variables, tagged, plus `extra`."""
    environment = commands.clean_environment()
    environment[TAG] = tag
    environment.update(extra or {})
    return environment


def cli_argv(command: str, flags: Mapping[str, str], *, resume: bool = False) -> list[str]:
    """`python -m singularity <command>` with `--flag value` for each flag."""
    argv = [sys.executable, "-m", "singularity", command]
    for name, value in flags.items():
        argv += ["--" + name.replace("_", "-"), value]
    return argv + (["--resume"] if resume else [])


def environ_of(pid: int) -> dict[str, str] | None:
    """The environment a process was started with (None if it is gone or a zombie)."""
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    if not data:
        return None
    pairs = (item.partition(b"=") for item in data.split(b"\0") if item)
    return {
        k.decode("utf-8", "surrogateescape"): v.decode("utf-8", "surrogateescape")
        for k, _, v in pairs
    }


def tagged_pids(tag: str) -> list[int]:
    """Living processes whose environment carries the tag."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        environment = environ_of(int(entry))
        if environment is not None and environment.get(TAG) == tag:
            found.append(int(entry))
    return found


def kill_tagged(tag: str, timeout: float = 60.0) -> int:
    """SIGKILL every process of the family until none is left; how many were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = tagged_pids(tag)
        if not pids:
            return len(killed)
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of the family survive SIGKILL: {pids}")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.02)


@contextlib.contextmanager
def family_reaper(tag: str) -> Iterator[str]:
    """Kill every process of the family when the block ends, whatever happened."""
    try:
        yield tag
    finally:
        kill_tagged(tag)


def run_cli(
    command: str,
    flags: Mapping[str, str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    log: Path,
    resume: bool = False,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[bytes]:
    """Run a command to its end. Output goes to files: a child inherits the parent's stdio
    and keeps pipes open long after the parent is gone."""
    with open(log, "ab") as err, open(log.with_suffix(".out"), "wb") as out:
        return subprocess.run(
            cli_argv(command, flags, resume=resume),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=dict(env),
            cwd=cwd,
            timeout=timeout,
            check=False,
        )


def cli_json(argv_tail: list[str], *, cwd: Path, env: Mapping[str, str]) -> tuple[int, Any]:
    """Run a read-only command and parse its JSON output (None when it printed none)."""
    result = subprocess.run(
        [sys.executable, "-m", "singularity", *argv_tail],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=dict(env),
        cwd=cwd,
        timeout=60,
        check=False,
    )
    text = result.stdout.decode("utf-8")
    return result.returncode, json.loads(text) if text.strip().startswith(("[", "{")) else None


def state_json(state_dir: Path) -> dict[str, Any] | None:
    """A being's `state.json`, parsed; None when it has none (yet)."""
    try:
        return dict(json.loads((state_dir / "state.json").read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None


def journal(state_dir: Path) -> list[Event]:
    """The complete events of a being's journal."""
    try:
        dir_fd = open_dir(state_dir)
    except FileNotFoundError:
        return []
    try:
        return read_events(dir_fd)
    finally:
        os.close(dir_fd)


def child_dirs(state_dir: Path) -> list[Path]:
    """The directories under `<state>/children/`."""
    root = state_dir / CHILDREN
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def grant_in(child_dir: Path, name: str) -> funding.Grant | None:
    """The grant stored under `name` (funding.json, funding.claimed.json, …), if any."""
    try:
        document = json.loads((child_dir / name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return funding.Grant(
        str(document["child_id"]), Decimal(document["amount"]), str(document["operation_id"])
    )


def spawn_results(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The successful spawn results in a being's saved conversation: child ids and pids."""
    results = []
    for message in state.get("conversation", []):
        if message.get("role") != "tool" or message.get("name") != "singularity_spawn_child":
            continue
        content = json.loads(message["content"])
        if content.get("status") == "success":
            results.append(dict(content["content"]))
    return results


def is_family_alive(tag: str) -> bool:
    """Whether any process of the family still runs."""
    return bool(tagged_pids(tag))


def being_money(state: Mapping[str, Any]) -> dict[str, Decimal]:
    """A saved budget's amounts as decimals."""
    budget = state["budget"]
    return {
        key: Decimal(budget[key])
        for key in (
            "starting",
            "remaining",
            "api_spent",
            "instance_spent",
            "earned",
            "children_funded",
        )
        if key in budget
    }


def budget_balances(money: Mapping[str, Decimal]) -> bool:
    """starting + earned − spent − children funded == remaining."""
    return (
        money["starting"]
        + money["earned"]
        - money["api_spent"]
        - money["instance_spent"]
        - money.get("children_funded", Decimal(0))
        == money["remaining"]
    )
