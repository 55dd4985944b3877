"""The skills configuration, the scrubbed environments and the outcome mapping, without servers.

Contract (decision 18, spec §10.1, §13.1-§13.4): the skills file is the common
`mcpServers` JSON format; a server is stdio (`command`, `args`, `env`, `cwd`) or
streamable HTTP (`url`, `headers`); its name is its surface and must make valid tool
names; every problem is a configuration error (exit 2). A stdio server's environment
is exactly PATH/LANG/LC_ALL plus what its entry names; Las's is §13.2's list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.errors import ConfigurationError, McpError
from singularity.settings_check import check_runtime
from singularity.skills import plan_skills, start_skills
from singularity.skills.config import HttpServer, StdioServer, is_surface_name, parse_skills
from singularity.skills.endpoints import HttpLaunch, StdioLaunch
from singularity.skills.environment import (
    SAFE_PATH,
    las_environment,
    server_environment,
    skarbiec_active,
)
from singularity.skills.las import check_required_surfaces, missing_surfaces
from singularity.skills.session import backoff
from singularity.skills.toolset import outcome_of
from singularity.tools.base import Status

BASE = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def parse(document: Any, environ: dict[str, str] | None = None) -> list[Any]:
    text = document if isinstance(document, str) else json.dumps(document)
    return parse_skills(text, "skills.json", environ or {})


def failure(document: Any, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigurationError) as caught:
        parse(document, environ)
    assert caught.value.exit_code == 2
    return str(caught.value)


# --- the file -------------------------------------------------------------------------


def test_stdio_and_http_servers_in_file_order() -> None:
    servers = parse(
        {
            "mcpServers": {
                "notes": {"command": "notes-mcp", "args": ["--db", "n.db"], "cwd": "/srv"},
                "search": {"url": "https://example.org/mcp", "headers": {"X-Key": "k"}},
                "off": {"command": "x", "disabled": True},
                "typed": {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp"},
                "legacy": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
            },
            "globalShortcut": "ignored: a desktop client's file works as it is",
        }
    )
    assert servers == [
        StdioServer("notes", "notes-mcp", ("--db", "n.db"), {}, "/srv"),
        HttpServer("search", "https://example.org/mcp", {"X-Key": "k"}),  # either transport
        HttpServer("typed", "http://127.0.0.1:1/mcp", {}, "streamable-http"),
        HttpServer("legacy", "http://127.0.0.1:1/sse", {}, "sse"),
    ]
    assert servers[1].transport == "auto"


def test_env_and_headers_take_variables_from_the_runtime_environment() -> None:
    environ = {"HOME": "/home/ada", "TOKEN": "t0k"}
    [stdio, http] = parse(
        {
            "mcpServers": {
                "a": {
                    "command": "a",
                    "env": {"HOME": "${HOME}", "MODE": "${MODE:-fast}", "X": "1"},
                },
                "b": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
            }
        },
        environ,
    )
    assert stdio.env == {"HOME": "/home/ada", "MODE": "fast", "X": "1"}
    assert http.headers == {"Authorization": "Bearer t0k"}
    assert failure({"mcpServers": {"a": {"command": "a", "env": {"K": "${NOPE}"}}}}) == (
        "configuration: skills file skills.json: server 'a': `env`: `K` refers to ${NOPE}, "
        "which is not set"
    )


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{nope", "not valid JSON"),
        ('{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}', "duplicate key 'a'"),
        ("[]", "must be a JSON object"),
        ({"servers": {}}, "`mcpServers` must be an object"),
        ({"mcpServers": {"a": "x"}}, "server 'a': must be an object"),
        ({"mcpServers": {"a": {}}}, "needs `command` (stdio) or `url` (HTTP or SSE)"),
        ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, "either `command` or `url`"),
        ({"mcpServers": {"a": {"command": "x", "evn": {}}}}, "unknown key `evn` for a stdio"),
        ({"mcpServers": {"a": {"url": "http://h", "args": []}}}, "unknown key `args` for a http"),
        ({"mcpServers": {"a": {"type": "sse", "command": "x"}}}, "`command` needs a stdio"),
        ({"mcpServers": {"a": {"type": "ws", "url": "http://h"}}}, "unknown `type` 'ws'"),
        ({"mcpServers": {"a": {"type": "http", "command": "x"}}}, "`command` needs a stdio"),
        ({"mcpServers": {"a": {"command": ""}}}, "`command` must be a non-empty string"),
        ({"mcpServers": {"a": {"command": "x", "args": "-v"}}}, "`args` must be an array"),
        ({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}, "`K` must be a string"),
        ({"mcpServers": {"a": {"command": "x", "env": {"A=B": "1"}}}}, "invalid name 'A=B'"),
        ({"mcpServers": {"a": {"url": "ftp://h/x"}}}, "`url` must be an http or https URL"),
        ({"mcpServers": {"a": {"command": "x", "disabled": "no"}}}, "`disabled` must be true"),
    ],
)
def test_bad_files_are_configuration_errors(document: Any, message: str) -> None:
    text = failure(document)
    assert text.startswith("configuration: skills file skills.json: ")
    assert message in text


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("notes", True),
        ("my-notes_2", True),
        ("a", True),
        ("x" * 32, True),
        ("x" * 33, False),
        ("a__b", False),  # `__` separates the surface from the tool
        ("_a", False),
        ("a_", False),
        ("-a", False),
        ("a.b", False),
        ("ünï", False),
        ("", False),
    ],
)
def test_server_names_must_be_surface_names(name: str, valid: bool) -> None:
    assert is_surface_name(name) is valid
    document = {"mcpServers": {name: {"command": "x"}}}
    if valid:
        assert parse(document)[0].name == name
    else:
        assert "a server name must be" in failure(document)


def test_a_missing_or_unparsable_skills_file_fails_the_settings_check(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(ConfigurationError) as caught:
        check_runtime(resolve({"skills_file": str(missing)}, environ={}))
    assert str(caught.value) == (
        f"configuration: skills file {missing}: No such file or directory (os error 2)"
    )
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": ', "utf-8")
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        check_runtime(resolve({"skills_file": str(broken)}, environ={}))


def test_plan_puts_las_first_and_gives_each_stdio_server_the_scrubbed_environment(
    tmp_path: Path,
) -> None:
    skills = tmp_path / "skills.json"
    skills.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "notes": {"command": "n", "args": ["-x"], "env": {"HOME": "${HOME}"}},
                    "web": {"url": "http://127.0.0.1:9/mcp"},
                }
            }
        )
    )
    entry = tmp_path / "las.mjs"
    entry.write_text("")
    settings = resolve(
        {"skills_file": str(skills), "las_entrypoint": str(entry), "las_only": "weles"},
        environ={},
    )
    las, notes, web = plan_skills(settings, {"HOME": "/home/ada", "SECRET_TOKEN": "canary"})
    assert (las.label, las.surface, las.is_las) == ("Las", None, True)
    assert isinstance(las.launch, StdioLaunch)
    assert las.launch.argv == ("node", str(entry))
    assert las.launch.initialize_extra == {"agentId": "local"}
    assert (notes.label, notes.surface) == ("skill server notes", "notes")
    assert notes.launch == StdioLaunch(("n", "-x"), {**BASE, "HOME": "/home/ada"})
    assert web.launch == HttpLaunch("http://127.0.0.1:9/mcp", {})


# --- environments ---------------------------------------------------------------------


def test_a_server_environment_is_the_base_set_plus_what_it_names() -> None:
    assert server_environment({}) == BASE
    assert server_environment({"PATH": "/opt/bin", "K": "v"}) == {
        **BASE,
        "PATH": "/opt/bin",
        "K": "v",
    }


RELEASE = {
    "LAS_RELEASE_MANIFEST_FILE": "/r/manifest",
    "LAS_RELEASE_MANIFEST_SIGNATURE_FILE": "/r/signature",
    "LAS_RELEASE_TRUST_STORE_FILE": "/r/trust",
    "LAS_RELEASE_WATERMARK_FILE": "/r/watermark",
}
RUNTIME_ENV = {
    "SKARBIEC_CAP_POLICY": "/p",
    "SKARBIEC_WORM_RECEIPT_COMMAND": "receipt",
    "SKARBIEC_MCP_AGENT_ID": "ambient-must-not-win",
    "SKARBIEC_UNLISTED": "not passed",
    "HOME": "/home/ada",
    "AWS_SECRET_ACCESS_KEY": "canary",
}


def test_las_environment_with_skarbiec_active() -> None:
    env = las_environment(
        las_only="skarbiec,finance",
        las_skip=None,
        release_files=RELEASE,
        agent_id="ada",
        runtime_environ=RUNTIME_ENV,
    )
    assert env == {
        **BASE,
        "LAS_ONLY": "skarbiec,finance",
        **RELEASE,
        "SKARBIEC_CAP_POLICY": "/p",
        "SKARBIEC_WORM_RECEIPT_COMMAND": "receipt",
        "SKARBIEC_MCP_AGENT_ID": "ada",
    }


def test_las_environment_without_skarbiec() -> None:
    env = las_environment(
        las_only="skarbiec,finance",
        las_skip="skarbiec",
        release_files=RELEASE,
        agent_id="ada",
        runtime_environ=RUNTIME_ENV,
    )
    assert env == {**BASE, "LAS_ONLY": "skarbiec,finance", **RELEASE, "LAS_SKIP": "skarbiec"}


@pytest.mark.parametrize(
    ("only", "skip", "active"),
    [
        ("", None, True),
        (" , ", None, True),
        ("weles, skarbiec ", None, True),
        ("weles", None, False),
        ("skarbiec", "echo, skarbiec", False),
        ("", "skarbiec", False),
    ],
)
def test_skarbiec_is_active_per_las_only_and_las_skip(
    only: str, skip: str | None, active: bool
) -> None:
    assert skarbiec_active(only, skip) is active


def test_las_refuses_an_agent_id_that_is_not_an_identifier(tmp_path: Path) -> None:
    entry = tmp_path / "las.mjs"
    entry.write_text("")
    settings = resolve({"las_entrypoint": str(entry), "agent_id": "not an id"}, environ={})
    with pytest.raises(McpError) as caught:
        plan_skills(settings, {})
    assert (str(caught.value), caught.value.exit_code) == (
        "mcp: invalid immutable Las agent identity",
        3,
    )


# --- surfaces, back-off, outcomes -------------------------------------------------------


def test_required_surfaces() -> None:
    names = ["finance__finance_propose", "weles__status", "singularity_memory_recall"]
    assert missing_surfaces(names, ["finance", "weles", "fin", "skarbiec"]) == ["fin", "skarbiec"]
    check_required_surfaces(names, ["finance"], with_las=True)
    with pytest.raises(McpError, match=r"^mcp: required Las surface unavailable: skarbiec$"):
        check_required_surfaces(names, ["skarbiec"], with_las=True)
    with pytest.raises(McpError, match=r"^mcp: required skill surface unavailable: notes$"):
        check_required_surfaces(names, ["notes"], with_las=False)


def test_required_surfaces_without_any_server() -> None:
    assert start_skills([], timeout=1, grace=1).toolsets == []
    with pytest.raises(McpError, match="required skill surface unavailable: finance"):
        start_skills([], timeout=1, grace=1, required_surfaces=["finance"])


def test_restart_backoff_is_bounded() -> None:
    assert [backoff(n) for n in range(1, 10)] == [0, 1, 2, 4, 8, 16, 32, 60, 60]


def test_outcome_mapping_keeps_the_whole_result() -> None:
    ok = {"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}}
    outcome = outcome_of(ok)
    assert (outcome.status, outcome.content, outcome.error_code) == (Status.SUCCESS, ok, None)
    explicit = {**ok, "isError": False}
    assert outcome_of(explicit).status is Status.SUCCESS
    failed = {"content": [{"type": "text", "text": "no"}], "isError": True}
    outcome = outcome_of(failed)
    assert (outcome.status, outcome.content, outcome.error_code) == (
        Status.FAILED,
        failed,
        "remote_tool",
    )
    assert outcome_of({"content": [], "isError": "true"}).status is Status.SUCCESS
