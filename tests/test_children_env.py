"""What a child inherits (spec §14, reliability anchors §7 and §11 items 34–36).

- The child's environment is exactly the parent's, minus the raw credentials (which become
  `*_FILE` paths to 0600 files in the child's directory), plus every resolved setting (so
  configuration the parent got by flags reaches it), plus the five overrides. Read from
  `/proc/<pid>/environ` of the real child while the gateway holds it in a model call.
- No secret value is in the child's environment or its arguments; it signs its requests
  with the parent's HMAC secret all the same, read from its file.
- The child starts in its own session, stdin `/dev/null`, in the parent's working
  directory with the parent's stdout and stderr.
- The runtime makes itself non-dumpable, so a process of the same user (a child of it, or
  any other) cannot read its environment through `/proc/<pid>/environ`: shown with the
  real runtime and a probe both running as `nobody` (root could read it anyway), next to
  an ordinary `nobody` process whose environment the same probe can read.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from singularity.cli import live
from singularity.cli.main import cli
from singularity.config import ALL_OPTIONS, resolve
from singularity.runtime.family import children
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.children_gateway import FamilyGateway, spawn_turn
from tests.support.children_inproc import open_parent, parent_settings, spawn_call
from tests.support.children_procs import (
    clean_environment,
    environ_of,
    family_reaper,
    new_tag,
    run_cli,
    spawn_results,
    state_json,
    tagged_pids,
)
from tests.support.polling import wait_for

REPO = Path(__file__).resolve().parents[1]
HMAC_SECRET = "canary-secret"
API_KEY = "canary-key"
SPECIALTY = "reading its own environment"
# Given only as flags to the parent; the child must get them as variables all the same.
PARENT_FLAGS = {
    "state_dir": "parent",
    "workspace": "ws",
    "agent_name": "Parent",
    "agent_ticker": "PAR",
    "input_price": "7",
    "starting_balance": "100",
    "cycle_interval_secs": "0",
    "max_tokens": "64",
    "http_timeout_secs": "60",
}
PARENT_ENV = {
    "CANARY_PLAIN": "1",
    "OPENAI_API_KEY": "canary-openai",  # the bearer fallback: a raw secret, never inherited
    "SINGULARITY_AGENT_TYPE": "explorer",  # configuration by environment stays as it is
    "WISENT_APP_AGENT_AUTH_SECRET": HMAC_SECRET,
    "BRAMA_API_KEY": API_KEY,
}


def _expected_environment(
    parent_env: dict[str, str], flags: dict[str, str], child_dir: str
) -> dict[str, str]:
    expected = {
        k: v
        for k, v in parent_env.items()
        if k not in ("WISENT_APP_AGENT_AUTH_SECRET", "BRAMA_API_KEY", "OPENAI_API_KEY")
    }
    for option in ALL_OPTIONS:
        assert option.env is not None
        value = flags.get(option.name, parent_env.get(option.env, option.default))
        if value is not None:
            expected[option.env] = value
    expected.update(
        {
            "BRAMA_HMAC_SECRET_FILE": os.path.join(child_dir, "brama-hmac.secret"),
            "BRAMA_API_KEY_FILE": os.path.join(child_dir, "brama-api-key.secret"),
            "SINGULARITY_AGENT_NAME": "Kid",
            "SINGULARITY_AGENT_TICKER": "KID",
            "SINGULARITY_SPECIALTY": SPECIALTY,
            "SINGULARITY_STATE_DIR": child_dir,
            "SINGULARITY_RESUME": "false",
        }
    )
    return expected


def test_the_child_environment_is_exactly_the_expected_set(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    release = threading.Event()

    def plan(name: str, number: int) -> Turn | None:
        if name == "Parent" and number == 0:
            return spawn_turn("Kid", "KID", SPECIALTY, "50")
        if name == "Kid" and number == 0:
            release.wait(90)
        return None

    tag = new_tag()
    parent_env = clean_environment(tag, PARENT_ENV)
    with FamilyGateway(plan, hmac_secret=HMAC_SECRET) as gateway, family_reaper(tag):
        try:
            flags = {**PARENT_FLAGS, "brama_url": gateway.url}
            log = tmp_path / "parent.log"
            result = run_cli("once", flags, env=parent_env, cwd=tmp_path, log=log)
            assert result.returncode == 0, log.read_text()[-3000:]
            parent = state_json(tmp_path / "parent")
            assert parent is not None
            [spawned] = spawn_results(parent)
            [record] = parent["mind"]["children"]
            pid = spawned["pid"]
            wait_for(lambda: gateway.requests_of("Kid") >= 1, "the child's first model call")
            # It signed its request with the parent's secret, read from its own file.
            assert gateway.refused == 0

            child_env = environ_of(pid)
            assert child_env is not None
            expected = _expected_environment(parent_env, flags, record["state_dir"])
            assert set(child_env) == set(expected)
            assert child_env == expected
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
            assert argv[0] == os.fsencode(sys.executable)
            assert argv[-3:] == [b"-m", b"singularity", b"run"]
            for secret in (HMAC_SECRET, API_KEY):
                assert not [k for k, v in child_env.items() if secret in v], secret
                assert not [a for a in argv if secret.encode() in a], secret
            for variable, value in (
                (b"BRAMA_HMAC_SECRET_FILE", HMAC_SECRET),
                (b"BRAMA_API_KEY_FILE", API_KEY),
            ):
                path = tmp_path / child_env[variable.decode()]
                assert path.parent == tmp_path / record["state_dir"]
                assert stat.S_IMODE(path.stat().st_mode) == 0o600
                assert path.read_text() == value

            # Its own session, stdin from /dev/null, the parent's cwd and output files.
            assert os.getsid(pid) == pid
            assert os.getpgid(pid) == pid
            assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
            assert os.readlink(f"/proc/{pid}/cwd") == str(tmp_path)
            assert os.readlink(f"/proc/{pid}/fd/1") == str(log.with_suffix(".out"))
            assert os.readlink(f"/proc/{pid}/fd/2") == str(log)
        finally:
            release.set()


def test_a_credential_file_the_parent_was_given_wins_over_its_raw_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for the parent (§3.1), `BRAMA_HMAC_SECRET_FILE` beats the raw HMAC secret: the
    child must sign with the same secret as its parent, not with the raw one."""
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "child-env.json"
    code = (
        "import json, os, sys; json.dump({k: v for k, v in os.environ.items() "
        "if k.startswith('BRAMA_')}, open(sys.argv[1], 'w'))"
    )
    monkeypatch.setattr(
        children, "child_command", lambda: [sys.executable, "-c", code, str(report)]
    )
    settings = parent_settings(
        tmp_path,
        secrets={"WISENT_APP_AGENT_AUTH_SECRET": "raw", "BRAMA_API_KEY": "key"},
        brama_secret_file="/run/parent-hmac.secret",
    )
    being = open_parent(settings)
    try:
        outcome = spawn_call(
            being, settings, {"name": "Kid", "ticker": "K", "specialty": "t", "budget": "1"}
        )
    finally:
        being.close()
    assert outcome.status.value == "success", outcome
    seen: dict[str, str] = {}

    def reported() -> bool:
        try:
            seen.update(json.loads(report.read_text()))
        except (OSError, ValueError):
            return False
        return True

    wait_for(reported, "the child to report its environment")
    child_dir = os.path.join("parent", "children", outcome.content["child_id"])
    assert seen["BRAMA_HMAC_SECRET_FILE"] == "/run/parent-hmac.secret"
    assert seen["BRAMA_API_KEY_FILE"] == os.path.join(child_dir, "brama-api-key.secret")
    assert "BRAMA_API_KEY" not in seen
    assert sorted(os.listdir(child_dir)) == ["brama-api-key.secret", "funding.json"]


OVERRIDDEN = {"agent_name", "agent_ticker", "specialty", "state_dir", "resume", "brama_secret_file"}


@pytest.mark.parametrize(
    "flags",
    [
        {"input_price": "0.0000001", "instance_price": "0.10", "starting_balance": "0.00000001"},
        {
            "output_price": "123456789012345.123456789012",
            "temperature": "1e-5",
            "http_timeout_secs": "0.5",
            "cycle_interval_secs": "inf",
        },
        {
            "stimulus": "  a ray of sun  ",
            "required_surfaces": "",
            "las_skip": "x,y",
            "agent_type": "zażółć gęślą",
            "max_tokens": "4294967295",
        },
    ],
)
def test_the_child_resolves_exactly_the_parent_configuration(flags: dict[str, str]) -> None:
    """Whatever the parent resolved, from flags or anywhere, the child resolves it too."""
    parent = resolve(flags, environ={"WISENT_APP_AGENT_AUTH_SECRET": "s", "OTHER": "1"})
    environment = children.child_environment(
        {"OTHER": "1", "WISENT_APP_AGENT_AUTH_SECRET": "s"},
        parent,
        name="Kid",
        ticker="K",
        specialty="t",
        state_dir="p/children/x",
        secret_files={"BRAMA_HMAC_SECRET_FILE": "p/children/x/brama-hmac.secret"},
    )
    assert "s" not in environment.values()
    child = resolve({}, environ=environment)
    for option in ALL_OPTIONS:
        if option.name not in OVERRIDDEN:
            assert getattr(child, option.name) == getattr(parent, option.name), option.name
    assert (
        child.agent_name,
        child.agent_ticker,
        child.specialty,
        child.state_dir,
        child.resume,
    ) == ("Kid", "K", "t", "p/children/x", False)
    assert child.brama_secret_file == "p/children/x/brama-hmac.secret"
    assert child.raw_secrets == {}


PR_GET_DUMPABLE = 3


def test_make_non_dumpable_clears_the_dumpable_flag() -> None:
    code = (
        "import ctypes, ctypes.util\n"
        "from singularity.runtime.loop.hardening import make_non_dumpable\n"
        "libc = ctypes.CDLL(ctypes.util.find_library('c'))\n"
        "before = libc.prctl(3, 0, 0, 0, 0)\n"
        "print(before, make_non_dumpable(), libc.prctl(3, 0, 0, 0, 0))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split() == ["1", "True", "0"]


@pytest.mark.parametrize("command", [["once"], ["run", "--max-cycles", "1"]])
def test_once_and_run_make_the_runtime_non_dumpable_before_booting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    calls: list[str] = []
    boot = live.Runtime.boot

    def record_boot(*args: Any, **kwargs: Any) -> Any:
        calls.append("boot")
        return boot(*args, **kwargs)

    monkeypatch.setattr(live, "make_non_dumpable", lambda: calls.append("hardened") or True)
    monkeypatch.setattr(live.Runtime, "boot", record_boot)
    for name in list(os.environ):
        if name.startswith(("SINGULARITY_", "BRAMA_", "WISENT_")):
            monkeypatch.delenv(name)
    with ScriptedServer([Turn.text("done")]) as server:
        cli.main(
            [
                *command,
                "--state-dir",
                "s",
                "--workspace",
                "ws",
                "--brama-url",
                server.url,
                "--cycle-interval-secs",
                "0",
            ],
            standalone_mode=False,
        )
    assert calls == ["hardened", "boot"]


# --- /proc/<pid>/environ from a process of the same user --------------------------------

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
PROBE = (
    "import sys\n"
    "try:\n"
    "    data = open(f'/proc/{sys.argv[1]}/environ', 'rb').read()\n"
    "except OSError as error:\n"
    "    print('error', error.errno)\n"
    "else:\n"
    "    print('read', b'canary-parent-environ' in data)\n"
)


def _unprivileged() -> tuple[str, dict[str, Any], dict[str, str]]:
    """An interpreter, Popen options and environment for processes of one ordinary user.

    As root that user is `nobody`, with the system interpreter (the test's own may live
    under a directory `nobody` cannot enter) and this checkout on PYTHONPATH."""
    if os.geteuid() != 0:
        return sys.executable, {}, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO / 'src'}:{site_packages}", "HOME": "/"}
    options: dict[str, Any] = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    probe = (
        subprocess.run(
            [SYSTEM_PYTHON, "-c", "import singularity.cli.main"],
            env=env,
            cwd="/",
            capture_output=True,
            check=False,
            timeout=120,
            **options,
        )
        if os.path.exists(SYSTEM_PYTHON)
        else None
    )
    if probe is None or probe.returncode != 0:
        pytest.skip("no interpreter that `nobody` can run the program with")
    return SYSTEM_PYTHON, options, env


def _probe(python: str, options: dict[str, Any], env: dict[str, str], pid: int) -> str:
    result = subprocess.run(
        [python, "-c", PROBE, str(pid)],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        **options,
    )
    return result.stdout.strip()


def test_a_process_of_the_same_user_cannot_read_the_runtime_environment() -> None:
    python, options, env = _unprivileged()
    base = Path(tempfile.mkdtemp(prefix="sg-env-", dir="/tmp"))
    release = threading.Event()

    def plan(name: str, number: int) -> Turn | None:
        if name == "Hardened":
            release.wait(90)  # keep the runtime alive while it is probed
        return None

    tag = new_tag()
    canary = {"CANARY_PARENT": "canary-parent-environ", "CHILDREN_TAG": tag}
    plain: subprocess.Popen[bytes] | None = None
    try:
        (base / "ws").mkdir()
        if os.geteuid() == 0:
            for path in (base, base / "ws"):
                os.chown(path, NOBODY, NOBODY)
        with FamilyGateway(plan) as gateway, family_reaper(tag):
            argv = [
                python,
                "-m",
                "singularity",
                "once",
                "--state-dir",
                "p",
                "--workspace",
                "ws",
                "--brama-url",
                gateway.url,
                "--agent-name",
                "Hardened",
            ]
            runtime = subprocess.Popen(
                argv,
                env={**env, **canary},
                cwd=base,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                **options,
            )
            plain = subprocess.Popen(
                [python, "-c", "import time; time.sleep(120)"],
                env={**env, "CANARY_PARENT": canary["CANARY_PARENT"]},
                cwd="/",
                **options,
            )
            try:
                wait_for(
                    lambda: gateway.requests_of("Hardened") >= 1,
                    "the runtime's first model call",
                    timeout=90,
                )
                assert _probe(python, options, env, plain.pid) == "read True"
                assert _probe(python, options, env, runtime.pid) == "error 13"  # EACCES
            finally:
                release.set()
            assert runtime.wait(timeout=60) == 0
            wait_for(lambda: not tagged_pids(tag), "the runtime to stop")
    finally:
        release.set()
        if plain is not None:
            plain.kill()
            plain.wait()
        shutil.rmtree(base, ignore_errors=True)
