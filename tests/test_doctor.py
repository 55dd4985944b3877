"""`singularity doctor` against the servers users point it at (spec §17, decisions 22 and 24).

The gateway is the scripted server over real HTTP, shaped like the real servers: no
`health` route (llama-cpp-python, Ollama, OpenAI), an empty 200 (vLLM). Every check runs
whatever failed before it, and what `run` refuses `doctor` never passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import ModelsOutageServer, Result, cli_args
from tests.support.ports import closed_port_url

OK = {"brama_model": "scripted-model", "las_tools": 0, "most": None, "ok": True}


@pytest.mark.parametrize(
    "server",
    [
        ScriptedServer(serves_health=False),
        ScriptedServer(health=b""),
        ScriptedServer(),
    ],
    ids=["no-health-route", "empty-200", "health-ok"],
)
def test_doctor_passes_servers_with_or_without_health(
    tmp_path: Path, cli: Callable[..., Result], server: ScriptedServer
) -> None:
    with server:
        result = cli("doctor", *cli_args(tmp_path, server.url + "v1"))
        paths = [request.path for request in server.requests]
    assert result.code == 0, result.err
    assert json.loads(result.out) == OK
    assert paths[0] == "/health" and paths[-1] == "/v1/models"
    assert not (tmp_path / "being").exists()


def test_doctor_runs_every_check_and_reports_each_failure(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    skills = tmp_path / "skills.json"
    skills.write_text(json.dumps({"mcpServers": {"gone": {"command": "/nonexistent/server"}}}))
    args = cli_args(tmp_path, closed_port_url(), "--skills", str(skills), "--temperature", "7")
    result = cli("doctor", *args, "--max-tool-rounds", "0")
    assert result.code == 2  # the first failure is a configuration error
    report = json.loads(result.out)
    assert (report["ok"], report["las_tools"], report["most"]) == (False, None, None)
    problems = report["problems"]
    assert problems[0] == "limits: configuration: max tool rounds must be positive"
    assert problems[1].startswith("gateway health: brama: transport error: ")
    assert problems[2].startswith("skill servers: mcp: ")
    assert len(problems) == 3
    assert result.err.splitlines()[-1] == (
        "singularity: configuration: max tool rounds must be positive"
    )


def test_doctor_reports_an_unavailable_model_and_a_failing_model_list(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer(models=["other"]) as server:
        result = cli("doctor", *cli_args(tmp_path, server.url))
    assert result.code == 2
    assert json.loads(result.out)["problems"] == [
        "gateway model: configuration: configured Brama model is unavailable: scripted-model"
    ]
    with ModelsOutageServer(serves_health=False) as server:
        server.models_status = 401
        result = cli("doctor", *cli_args(tmp_path, server.url))
    assert result.code == 3
    assert json.loads(result.out)["problems"] == [
        "gateway health: brama: HTTP 401: model list unavailable"
    ]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (
            ("--workspace", ".", "--state-dir", ".singularity"),
            "workspace and state directory must not contain each other",
        ),
        (("--workspace", "missing"), "workspace: "),
        (("--resume", "--workspace", "ws"), "state: resume requested but no state exists"),
    ],
)
def test_doctor_never_passes_what_run_refuses(
    tmp_path: Path, cli: Callable[..., Result], layout: tuple[str, ...], message: str
) -> None:
    (tmp_path / "ws").mkdir()
    with ScriptedServer([Turn.text("never asked")]) as server:
        url = ("--brama-url", server.url, "--brama-model", "scripted-model")
        checked = cli("doctor", *url, *layout)
        refused = cli("once", *url, *layout)
        asked = len(server.completions)
    assert checked.code == refused.code != 0
    assert message in checked.err.splitlines()[-1]
    assert checked.err.splitlines()[-1] == refused.err.splitlines()[-1]
    assert json.loads(checked.out)["ok"] is False
    assert asked == 0


def test_doctor_with_the_defaults_in_a_fresh_directory(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer() as server:
        result = cli("doctor", BRAMA_BASE_URL=server.url)
    assert result.code == 0, result.err
    assert json.loads(result.out) == OK | {"brama_model": "any"}
    assert list(tmp_path.iterdir()) == []  # nothing created, not even the workspace
