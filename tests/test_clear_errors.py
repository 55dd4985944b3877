"""Malformed input gets a clear error naming what is wrong, never a traceback.

Contract: a `state.json` or journal line nested past the JSON depth limit, a journaled
ledger entry with an amount or token count that is not one, journaled credits whose sum
leaves the money range, a config file nested too deeply, a NUL in a configured path, and
deep JSON sent to the import socket each end with one line that says what and where (exit
4 or 5 for state, 2 for configuration; the socket answers an error), and nothing on disk
is changed by the refusal.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from singularity.jsoncodec import MAX_DEPTH, compact
from singularity.money import LIMIT_TEXT, RANGE_TEXT
from singularity.runtime.mind_import.service import ImportService, socket_path
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.import_socket import ask
from tests.support.loop_http import Result, boot, cli_args, run

ADD_RULE = "singularity_self_add_rule"
DEEP = "[" * 100_000 + "]" * 100_000
JUST_TOO_DEEP = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)


@pytest.fixture
def lived(tmp_path: Path, cli: Callable[..., Result]) -> Callable[..., Result]:
    """A being that lived one paid cycle with a tool call; `cli` to go on with it."""
    with ScriptedServer([Turn.tool_call(ADD_RULE, {"rule": "r"}), Turn.text("ok")]) as server:
        assert cli("once", *cli_args(tmp_path, server, "--input-price", "1")).code == 0
    return cli


def _being(root: Path) -> Path:
    return root / "being"


def _commands(root: Path, cli: Callable[..., Result]) -> dict[str, Result]:
    with ScriptedServer() as server:
        return {
            "show": cli("show", "--state-dir", str(_being(root))),
            "verify": cli("verify", str(_being(root))),
            "once": cli("once", "--resume", *cli_args(root, server)),
        }


def _rewrite_debits(root: Path, **fields: Any) -> None:
    """Change every journaled debit, and make the budget forget them so boot replays them."""
    journal = _being(root) / "activity.jsonl"
    lines = []
    for line in journal.read_text("utf-8").splitlines():
        event = json.loads(line)
        if event["type"] == "cost_debited":
            event.update(fields)
        lines.append(compact(event))
    journal.write_text("\n".join(lines) + "\n", "utf-8")
    path = _being(root) / "state.json"
    state = json.loads(path.read_text("utf-8"))
    state["budget"].update(
        last_operation=None, api_spent="0", instance_spent="0", remaining="10", total_tokens=0
    )
    path.write_text(json.dumps(state), "utf-8")


@pytest.mark.parametrize("depth", [DEEP, JUST_TOO_DEEP])
def test_a_deeply_nested_state_file(
    depth: str, tmp_path: Path, lived: Callable[..., Result]
) -> None:
    path = _being(tmp_path) / "state.json"
    state = json.loads(path.read_text("utf-8"))
    state["conversation"][0]["content"] = "@"
    path.write_text(json.dumps(state).replace('"@"', depth), "utf-8")
    before = path.read_bytes()
    results = _commands(tmp_path, lived)
    expected = f"state.json is not valid JSON: JSON nests deeper than {MAX_DEPTH} levels"
    assert results["show"].code == 5
    assert results["show"].err.strip() == f"singularity: {expected}"
    assert results["once"].code == 5
    assert results["once"].err.strip().splitlines()[-1] == f"singularity: {expected}"
    assert results["verify"].code == 4
    assert f"{_being(tmp_path)}: {expected}" in results["verify"].out.splitlines()
    assert path.read_bytes() == before


def test_a_deeply_nested_journal_line(tmp_path: Path, lived: Callable[..., Result]) -> None:
    journal = _being(tmp_path) / "activity.jsonl"
    lines = journal.read_text("utf-8").splitlines()
    lines.insert(2, '{"type":"warning","message":' + DEEP + "}")
    journal.write_text("\n".join(lines) + "\n", "utf-8")
    before = journal.read_bytes()
    results = _commands(tmp_path, lived)
    assert results["show"].code == 0
    assert results["once"].code == 4
    assert results["once"].err.strip().splitlines()[-1] == (
        "singularity: state: activity.jsonl is corrupt at line 3"
    )
    assert results["verify"].code == 4
    assert "activity.jsonl is corrupt at line 3" in results["verify"].out
    assert journal.read_bytes() == before


@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        ({"api": ["x"]}, "an invalid api: ['x']"),
        ({"api": "-1"}, "an invalid api: '-1'"),
        ({"instance": "1e99"}, "an invalid instance: '1e99'"),
        ({"tokens": "many"}, "an invalid token count: 'many'"),
        ({"tokens": 1.5}, "an invalid token count: 1.5"),
        ({"tokens": -3}, "an invalid token count: -3"),
        ({"tokens": True}, "an invalid token count: True"),
    ],
)
def test_a_journaled_ledger_entry_with_a_bad_amount_or_count(
    fields: dict[str, Any], shown: str, tmp_path: Path, lived: Callable[..., Result]
) -> None:
    _rewrite_debits(tmp_path, **fields)
    journal = (_being(tmp_path) / "activity.jsonl").read_bytes()
    operation = next(
        json.loads(line)["operation_id"]
        for line in journal.splitlines()
        if b'"cost_debited"' in line
    )
    with ScriptedServer() as server:
        result = lived("once", "--resume", *cli_args(tmp_path, server))
    assert result.code == 4
    assert result.err.strip().splitlines()[-1] == (
        f"singularity: state: activity.jsonl: cost_debited {operation} has {shown}"
    )
    assert (_being(tmp_path) / "activity.jsonl").read_bytes() == journal
    verified = lived("verify", str(_being(tmp_path)))
    assert verified.code == 4


def test_journaled_credits_that_would_leave_the_money_range(
    tmp_path: Path, lived: Callable[..., Result]
) -> None:
    """Each credit is in the range, their sum is not: boot refuses and journals nothing."""
    journal = _being(tmp_path) / "activity.jsonl"
    entries = [
        {
            "type": "revenue_credited",
            "at": "2026-01-02T03:04:05Z",
            "cycle": 1,
            "operation_id": f"op-credit-{n}",
            "amount": LIMIT_TEXT,
            "source": "finance__pay",
        }
        for n in range(2)
    ]
    entries.append(
        {
            "type": "cost_reserved",
            "at": "2026-01-02T03:04:06Z",
            "cycle": 1,
            "operation_id": "op-open",
            "amount": "1",
            "api": "1",
            "instance": "0",
        }
    )
    with journal.open("a", encoding="utf-8") as appending:
        appending.writelines(compact(entry) + "\n" for entry in entries)
    before = {
        name: (_being(tmp_path) / name).read_bytes() for name in ("activity.jsonl", "state.json")
    }
    with ScriptedServer() as server:
        result = lived("once", "--resume", *cli_args(tmp_path, server))
    assert result.code == 4
    assert result.err.strip().splitlines()[-1] == (
        "singularity: state: activity.jsonl: its ledger entries would leave budget.remaining "
        f"outside the money range ({RANGE_TEXT})"
    )
    assert {name: (_being(tmp_path) / name).read_bytes() for name in before} == before
    assert lived("verify", str(_being(tmp_path))).code == 4


def test_a_nul_in_a_configured_path(tmp_path: Path, cli: Callable[..., Result]) -> None:
    (tmp_path / "singularity.toml").write_text('state_dir = "being\\u0000evil"\n', "utf-8")
    with ScriptedServer() as server:
        result = cli("once", "--brama-url", server.url)
    assert result.code == 2
    assert result.err.strip() == "singularity: configuration: state_dir must not contain NUL"
    config = tmp_path / "other.toml"
    config.write_text('workspace = "w\\u0000"\n', "utf-8")
    shown = cli("show", "--config", str(config), "--state-dir", str(tmp_path / "none"))
    assert shown.code == 2
    assert shown.err.strip() == "singularity: configuration: workspace must not contain NUL"


def test_a_deeply_nested_config_file(tmp_path: Path, cli: Callable[..., Result]) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text("max_tokens = " + DEEP + "\n", "utf-8")
    with ScriptedServer() as server:
        result = cli("once", "--config", str(deep), *cli_args(tmp_path, server))
        assert server.completions == []
    assert result.code == 2
    assert (
        result.err.strip() == f"singularity: configuration: config file {deep}: nested too deeply"
    )
    assert not _being(tmp_path).exists()


def test_deep_json_to_the_import_socket_gets_an_error_reply(tmp_path: Path) -> None:
    deep_document = base64.b64encode(DEEP.encode()).decode()
    requests = {
        "request": DEEP.encode(),
        "document": compact(
            {"version": 1, "operation": "mind_import", "document_base64": deep_document}
        ).encode(),
    }
    with ScriptedServer() as server:

        async def live() -> dict[str, dict[str, Any]]:
            runtime = boot(tmp_path, server)
            service = ImportService(socket_path(str(_being(tmp_path))), runtime.apply_import)
            await service.start()
            try:
                return {
                    name: await asyncio.to_thread(ask, service.path, request)
                    for name, request in requests.items()
                }
            finally:
                await service.stop()
                await runtime.shutdown()

        answers = run(live())
    too_deep = f"JSON nests deeper than {MAX_DEPTH} levels"
    assert answers["request"] == {
        "ok": False,
        "error": f"invalid local state import request: {too_deep}",
    }
    assert answers["document"] == {"ok": False, "error": f"invalid Singularity import: {too_deep}"}
