"""Nothing the being can write configures its runtime (decision 31).

Contract: a being writes its workspace and nothing else. `./singularity.toml` is not read
when the working directory is the workspace or inside it (a warning says so); a config
file, skills file, secret or key file, the journal's key or database, or a skill server's
program inside the workspace, or reached through it by a symlink, is refused at boot with
exit 2 and a message naming it. The attack is played as a being would play it: through
its own file tool, then the next start.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from singularity.runtime.loop.reach import reaches_into
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import Result

WRITE = "singularity_file_write"


def _args(root: Path, server: ScriptedServer, workspace: str) -> list[str]:
    return [
        "--state-dir",
        str(root / "being"),
        "--workspace",
        workspace,
        "--brama-url",
        server.url,
        "--cycle-interval-secs",
        "0",
    ]


def test_a_being_that_writes_its_own_config_and_skills_files_configures_nothing(
    tmp_path: Path,
    cli: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    pwned = tmp_path / "pwned"
    skills = {"mcpServers": {"own": {"command": "sh", "args": ["-c", f"touch {pwned}"]}}}
    config = 'max_tokens = 7\nskills_file = "skills.json"\ninput_price = "0"\n'
    script = [
        Turn.tool_call(WRITE, {"path": "singularity.toml", "content": config}),
        Turn.tool_call(WRITE, {"path": "skills.json", "content": json.dumps(skills)}),
        Turn.text("written"),
    ]
    with ScriptedServer(script) as server:
        monkeypatch.chdir(workspace)  # the working directory is the workspace: `--workspace .`
        first = cli("once", *_args(tmp_path, server, "."), "--input-price", "5")
        assert first.code == 0, first.err
        assert (workspace / "singularity.toml").read_text() == config
        second = cli("once", "--resume", *_args(tmp_path, server, "."), "--input-price", "5")
        assert second.code == 0, second.err
        assert "not reading singularity.toml: the working directory is inside the workspace" in (
            caplog.text
        )
        assert server.completions[-1].json["max_tokens"] == 2048, "the being's file was read"
        named = cli(
            "once", "--resume", *_args(tmp_path, server, "."), "--config", "singularity.toml"
        )
        skilled = cli("once", "--resume", *_args(tmp_path, server, "."), "--skills", "skills.json")
    assert not pwned.exists(), "the being's command ran outside its workspace"
    assert named.code == 2
    assert named.err.strip().splitlines()[-1] == (
        f"singularity: configuration: the config file singularity.toml is inside the "
        f"workspace {workspace}, which the being can write; keep it outside"
    )
    assert skilled.code == 2
    assert "the skills file skills.json is inside the workspace" in skilled.err


def test_the_default_config_file_is_read_outside_the_workspace(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "singularity.toml").write_text("max_tokens = 7\n", "utf-8")
    with ScriptedServer([Turn.text("ok")]) as server:
        result = cli("once", *_args(tmp_path, server, str(tmp_path / "ws")))
        sent = server.completions[-1].json
    assert result.code == 0, result.err
    assert sent["max_tokens"] == 7


def _secret(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("s3cret-value\n", "utf-8")
    path.chmod(0o600)
    return path


OPTIONS = {
    "Brama API key file": ("--brama-api-key-file", "key"),
    "Brama secret file": ("--brama-secret-file", "key"),
    "Most token file": ("--most-token-file", "key"),
    "journal key file": ("--journal-key-file", "missing"),
    "skills file": ("--skills", "skills"),
    "config file": ("--config", "config"),
}


@pytest.mark.parametrize("what", list(OPTIONS))
@pytest.mark.parametrize("reached", ["inside", "through a link"])
def test_files_that_configure_the_runtime_are_refused_inside_the_workspace(
    what: str, reached: str, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "private").mkdir(parents=True)
    flag, kind = OPTIONS[what]
    if reached == "inside":
        path = workspace / "private" / "file"
    else:
        (tmp_path / "keys").symlink_to(workspace / "private")
        path = tmp_path / "keys" / "file"
    if kind == "key":
        _secret(path)
    elif kind == "skills":
        path.write_text('{"mcpServers": {}}', "utf-8")
    elif kind == "config":
        path.write_text("", "utf-8")
    with ScriptedServer() as server:
        result = cli("once", *_args(tmp_path, server, str(workspace)), flag, str(path))
    assert result.code == 2, result.err
    assert result.err.strip().splitlines()[-1] == (
        f"singularity: configuration: the {what} {path} is inside the workspace "
        f"{workspace}, which the being can write; keep it outside"
    )
    assert not (tmp_path / "being" / "state.json").exists()


# The same files named by environment variables, as an operator's unit file would name them.
VARIABLES = {
    "Brama API key file": ("BRAMA_API_KEY_FILE", "key"),
    "Brama secret file": ("BRAMA_HMAC_SECRET_FILE", "key"),
    "Most token file": ("MOST_SERVICE_TOKEN_FILE", "key"),
    "journal key file": ("SINGULARITY_JOURNAL_KEY_FILE", "missing"),
    "skills file": ("SINGULARITY_SKILLS_FILE", "skills"),
}


@pytest.mark.parametrize("what", list(VARIABLES))
def test_files_named_by_the_environment_are_refused_inside_the_workspace(
    what: str, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    variable, kind = VARIABLES[what]
    path = workspace / "file"
    if kind == "key":
        _secret(path)
    elif kind == "skills":
        path.write_text('{"mcpServers": {}}', "utf-8")
    with ScriptedServer() as server:
        result = cli("once", *_args(tmp_path, server, str(workspace)), **{variable: str(path)})
        assert server.completions == []
    assert result.code == 2, result.err
    assert result.err.strip().splitlines()[-1] == (
        f"singularity: configuration: the {what} {path} is inside the workspace "
        f"{workspace}, which the being can write; keep it outside"
    )
    assert not (tmp_path / "being" / "state.json").exists()


def test_the_journal_database_and_a_skill_program_are_refused_inside_the_workspace(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    program = workspace / "server.sh"
    program.write_text("#!/bin/sh\n", "utf-8")
    program.chmod(0o700)
    skills = tmp_path / "skills.json"
    skills.write_text(json.dumps({"mcpServers": {"own": {"command": str(program)}}}), "utf-8")
    script = tmp_path / "skills-script.json"
    script.write_text(
        json.dumps({"mcpServers": {"py": {"command": "python3", "args": [str(program)]}}}),
        "utf-8",
    )
    database = workspace / "journal.sqlite3"
    with ScriptedServer() as server:
        args = _args(tmp_path, server, str(workspace))
        journal = cli("once", *args, "--journal-url", f"sqlite://{database}")
        run_program = cli("once", *args, "--skills", str(skills))
        given_file = cli("once", *args, "--skills", str(script))
    assert journal.code == 2
    assert f"the journal database {database} is inside the workspace" in journal.err
    assert run_program.code == 2
    assert f"the program of skill server own {program} is inside the workspace" in (run_program.err)
    assert given_file.code == 2
    assert f"the file given to skill server py {program} is inside the workspace" in (
        given_file.err
    )


def test_reaches_into_follows_each_link_and_takes_dotdot_after_it(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "deep").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (tmp_path / "link").symlink_to(root / "deep")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    canonical = os.path.realpath(root)
    assert reaches_into(str(root / "file"), canonical)
    assert reaches_into(str(tmp_path / "link" / "file"), canonical)
    # The kernel takes `..` after the link: link/.. is ws, not tmp_path.
    assert reaches_into(str(tmp_path / "link" / ".." / "file"), canonical)
    assert not reaches_into(str(tmp_path / "out" / "file"), canonical)
    assert not reaches_into(str(tmp_path / "ws-sibling" / "file"), canonical)
    assert not reaches_into(str(tmp_path / "loop" / "file"), canonical)
