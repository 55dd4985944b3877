"""The sync seam: every fsync and fdatasync goes through `fsio.sync`, the tests see each one,
and only tests arm failpoints (docs/testing.md).

Contract: no module of the runtime but `fsio.sync` calls `os.fsync`/`os.fdatasync` (or
any other sync call); no module of the runtime arms failpoints or reads a failpoint
variable; a child process is armed only through the test environment
(`tests/support/failpoints.py`); the recorder tells a synced file or entry from one that
is not.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from singularity.storage import fsio
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import SINGULARITY
from tests.support.failpoints import VARIABLE, armed_environment
from tests.support.loop_http import cli_args
from tests.support.syncs import SyncLog

SRC = Path(__file__).resolve().parent.parent / "src" / "singularity"
SYNC_CALLS = {"fsync", "fdatasync", "sync", "syncfs", "sync_file_range"}
ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text("utf-8"))) for path in sorted(SRC.rglob("*.py"))]


def _enclosing_functions(tree: ast.Module) -> dict[ast.AST, str]:
    owner: dict[ast.AST, str] = {}
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                owner.setdefault(node, function.name)
    return owner


def test_every_sync_of_the_runtime_is_a_call_of_fsio_sync() -> None:
    offenders = []
    for path, tree in _modules():
        owner = _enclosing_functions(tree)
        for node in ast.walk(tree):
            named = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else None
            )
            if named not in SYNC_CALLS:
                continue
            is_os = isinstance(node, ast.Attribute) and (
                isinstance(node.value, ast.Name) and node.value.id == "os"
            )
            imported = isinstance(node, ast.Name) and named != "sync"
            in_seam = path.name == "fsio.py" and owner.get(node) == "sync"
            if (is_os or imported) and not in_seam:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} {named}")
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "os":
                offenders.extend(
                    f"{path.relative_to(SRC)}:{node.lineno} from os import {alias.name}"
                    for alias in node.names
                    if alias.name in SYNC_CALLS
                )
    assert offenders == []


def test_no_runtime_module_arms_failpoints_or_reads_a_failpoint_variable() -> None:
    offenders = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute | ast.Name):
                name = node.attr if isinstance(node, ast.Attribute) else node.id
                if name == "arm_failpoints":
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno} arm_failpoints")
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and ENV_NAME.fullmatch(node.value)
                and "FAILPOINT" in node.value
            ):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno} {node.value!r}")
    assert offenders == []


def _once(tmp_path: Path, server: ScriptedServer, env: dict[str, str]) -> int:
    result = subprocess.run(
        [str(SINGULARITY), "once", *cli_args(tmp_path, server)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        check=False,
    )
    return result.returncode


def test_a_child_process_is_armed_only_by_the_test_environment(tmp_path: Path) -> None:
    plain = {k: v for k, v in os.environ.items() if not k.startswith("SINGULARITY_")}
    with ScriptedServer([Turn.text("hello")]) as server:
        # The variable alone arms nothing: the runtime never reads it.
        assert _once(tmp_path, server, {**plain, VARIABLE: "state.rename=kill"}) == 0
        state = tmp_path / "being"
        assert (state / "state.json").exists()
        (state / "state.json").unlink()
        (state / "activity.jsonl").unlink()
        # The test environment arms it at interpreter start: killed at the first save.
        assert _once(tmp_path, server, armed_environment("state.rename=kill", plain)) == -9
    assert not (state / "state.json").exists()


# --- the recorder ------------------------------------------------------------------------


@pytest.fixture
def dir_fd(tmp_path: Path) -> Iterator[int]:
    fd = fsio.open_dir(tmp_path)
    yield fd
    os.close(fd)


def test_a_replace_is_recorded_file_then_directory(
    tmp_path: Path, dir_fd: int, sync_log: SyncLog
) -> None:
    fsio.replace_file(dir_fd, "f", b"abc", temp_prefix=".f-", point="f")
    file_sync, dir_sync = sync_log.syncs
    assert (file_sync.name, file_sync.size, file_sync.is_dir) == ("f.fsync", 3, False)
    assert file_sync.identity == sync_log.of(tmp_path / "f")[0].identity
    assert dir_sync.name == "f.dirsync" and dir_sync.entries is not None
    assert dir_sync.entries["f"] == file_sync.identity
    assert sync_log.problems(tmp_path) == []


def test_an_append_is_recorded_as_a_data_sync_at_its_size(
    tmp_path: Path, dir_fd: int, sync_log: SyncLog
) -> None:
    fd = fsio.open_append(dir_fd, "log", "log")
    try:
        fsio.append_durably(fd, b"one\n", "log")
        fsio.append_durably(fd, b"two\n", "log")
    finally:
        os.close(fd)
    assert [(s.name, s.data_only, s.is_dir) for s in sync_log.syncs] == [
        ("log.dirsync", False, True),
        ("log.fsync", True, False),
        ("log.fsync", True, False),
    ]
    assert [s.size for s in sync_log.syncs[1:]] == [4, 8]
    assert sync_log.problems(tmp_path) == []


def test_the_recorder_sees_an_unsynced_append_and_an_unsynced_entry(
    tmp_path: Path, dir_fd: int, sync_log: SyncLog
) -> None:
    fd = fsio.open_append(dir_fd, "log", "log")
    try:
        fsio.append_durably(fd, b"one\n", "log")
        fsio.write_all(fd, b"two\n")  # written, never synced
    finally:
        os.close(fd)
    fd = os.open("new", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=dir_fd)
    try:
        fsio.sync(fd, "new.fsync")  # its content is synced, its directory entry is not
    finally:
        os.close(fd)
    assert sorted(sync_log.problems(tmp_path)) == [
        f"{tmp_path / 'log'}: content not synced at 8 bytes",
        f"{tmp_path / 'new'}: entry not synced in its directory",
    ]
