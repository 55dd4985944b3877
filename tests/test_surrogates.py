"""One lone surrogate from outside cannot crash or brick a being.

Contract: a `\\ud800` escape is valid JSON but no UTF-8 file or request can hold what it
parses to. Every text from outside (a completion's content, tool names and arguments,
ids, an error body's `error.message`, a skill's result, option values) passes
`safe_text`, which turns each lone surrogate into U+FFFD, or is refused with a clear
error; and a state that holds one anyway can always be saved. After each attack the being
exits as it would without the surrogate, resumes, and `verify` passes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from singularity.domain.state import parse_state
from singularity.errors import StateError
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.runtime.mind_import.document import parse_import
from singularity.storage import fsio
from singularity.storage.activity import read_events
from singularity.store.directory import DirectoryStore
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from singularity.text import REPLACEMENT, safe_json, safe_text
from tests.servers import HERE, stdio, write_skills
from tests.support.loop_http import Result, cli_args, state_of

HOSTILE = HERE / "hostile.py"
ADD_RULE = "singularity_self_add_rule"
LONE = "\\ud800"  # the escape as it stands in JSON text


def _completion(message: str, finish: str = "stop", model: str = "m") -> Turn:
    return Turn.raw(
        '{"id":"x","model":"'
        + model
        + '","choices":[{"index":0,"message":'
        + message
        + ',"finish_reason":"'
        + finish
        + '"}],'
        '"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}'
    )


def _tool_call(name: str, arguments: str, call_id: str = "c1") -> Turn:
    call = (
        '{"id":"'
        + call_id
        + '","type":"function","function":{"name":"'
        + name
        + '","arguments":"'
        + arguments
        + '"}}'
    )
    return _completion(
        '{"role":"assistant","content":null,"tool_calls":[' + call + "]}", "tool_calls"
    )


ATTACKS = {
    "content": [_completion('{"role":"assistant","content":"odd ' + LONE + ' text"}')],
    "tool name": [_tool_call("evil" + LONE, "{}"), Turn.text("done")],
    "tool arguments": [
        _tool_call(ADD_RULE, '{\\"rule\\":\\"odd ' + LONE + '\\"}'),
        Turn.text("done"),
    ],
    "escaped tool arguments": [
        _tool_call(ADD_RULE, '{\\"rule\\":\\"odd \\\\ud800\\"}'),
        Turn.text("done"),
    ],
    "tool call id": [_tool_call(ADD_RULE, '{\\"rule\\":\\"r\\"}', "id" + LONE), Turn.text("ok")],
    "model": [_completion('{"role":"assistant","content":"hi"}', model="m" + LONE)],
    "5xx error message": [
        Turn.raw('{"error":{"message":"upstream ' + LONE + ' broke"}}', status=502),
        Turn.text("recovered"),
    ],
}


# Where the replaced text is kept (the escaped arguments are refused by the rule tool, and
# the answering model's name is not kept).
SEEN_IN = {
    "content": "state.json",
    "tool name": "state.json",
    "tool arguments": "state.json",
    "tool call id": "state.json",
    "5xx error message": "activity.jsonl",
}


def _assert_sound(root: Path) -> None:
    data = (root / "being" / "state.json").read_bytes()
    data.decode("utf-8")  # strict: every byte is UTF-8
    parse_state(data)
    for line in (root / "being" / "activity.jsonl").read_bytes().splitlines():
        line.decode("utf-8")
    assert verify_state_dir(str(root / "being")) == []


@pytest.mark.parametrize("position", list(ATTACKS))
def test_a_lone_surrogate_from_the_gateway_neither_crashes_nor_bricks(
    position: str, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer(ATTACKS[position]) as server:
        first = cli("run", *cli_args(tmp_path, server, "--max-cycles", "2"))
        assert first.code == 0, first.err
        assert "Traceback" not in first.err
        _assert_sound(tmp_path)
        resumed = cli("once", "--resume", *cli_args(tmp_path, server))
        assert resumed.code == 0, resumed.err
    _assert_sound(tmp_path)
    state = state_of(tmp_path)
    assert state.status == "stopped"
    kept = SEEN_IN.get(position)
    if kept is not None:
        assert REPLACEMENT in (tmp_path / "being" / kept).read_text("utf-8")


def test_a_permanent_error_with_a_lone_surrogate_saves_the_being_failed(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.raw('{"error":{"message":"no ' + LONE + '"}}', status=400)]) as srv:
        result = cli("once", *cli_args(tmp_path, srv))
    assert result.code == 3
    assert result.err.splitlines()[-1] == f"singularity: brama: HTTP 400: no {REPLACEMENT}"
    _assert_sound(tmp_path)
    assert state_of(tmp_path).status == "failed"


@pytest.mark.parametrize("where", ["text", "structured", "error"])
def test_a_lone_surrogate_from_a_skill_neither_crashes_nor_bricks(
    where: str, tmp_path: Path, cli: Callable[..., Result]
) -> None:
    skills = write_skills(tmp_path / "skills.json", {"hostile": stdio(HOSTILE)})
    call = Call("hostile__surrogate", json.dumps({"where": where}), "s1")
    with ScriptedServer([Turn.tool_calls(call), Turn.text("done")]) as server:
        args = cli_args(tmp_path, server, "--skills", str(skills), "--mcp-timeout-secs", "5")
        result = cli("once", *args)
        assert result.code == 0, result.err
        resumed = cli("once", "--resume", *args)
        assert resumed.code == 0, resumed.err
    _assert_sound(tmp_path)
    answer = next(m for m in state_of(tmp_path).conversation if m.get("tool_call_id") == "s1")
    assert "\ud800" not in answer["content"]


def test_a_state_holding_lone_surrogates_can_always_be_saved(tmp_path: Path) -> None:
    fixture = Path(__file__).parent / "fixtures" / "state" / "rich-being.json"
    state = parse_state(fixture.read_bytes())
    state.mind.rules.append("rule \ud800")
    state.mind.memories[0].text = "memory \udfff"
    state.conversation.append({"role": "user", "content": "say \ud800\udc00"})
    saved = parse_state(state.to_json())
    assert saved.mind.rules[-1] == f"rule {REPLACEMENT}"
    assert saved.mind.memories[0].text == f"memory {REPLACEMENT}"
    store = DirectoryStore.open(str(tmp_path / "being"))
    try:
        assert store.load() is None
        store.commit(state, [{"type": "warning", "message": "bad \ud800"}])
    finally:
        store.close()
    root = fsio.open_dir(tmp_path / "being")
    try:
        assert read_events(root) == [{"type": "warning", "message": f"bad {REPLACEMENT}"}]
    finally:
        os.close(root)


def test_safe_text_changes_nothing_but_lone_surrogates() -> None:
    assert safe_text("plain ✓ 😀") == "plain ✓ 😀"
    assert safe_text("a\ud800b\udc00") == f"a{REPLACEMENT}b{REPLACEMENT}"
    assert safe_json({"k\ud800": ["v\udfff", 1, None]}) == {
        f"k{REPLACEMENT}": [f"v{REPLACEMENT}", 1, None]
    }


def test_option_values_that_are_not_utf8_are_refused(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer() as server:
        result = cli("once", *cli_args(tmp_path, server), SINGULARITY_AGENT_NAME="bad\udcff")
        raw = cli("once", *cli_args(tmp_path, server), BRAMA_API_KEY="k\udcff")
    assert result.code == 2
    assert (
        result.err.strip()
        == "singularity: configuration: SINGULARITY_AGENT_NAME is not valid UTF-8"
    )
    assert raw.code == 2
    assert raw.err.strip() == "singularity: configuration: BRAMA_API_KEY is not valid UTF-8"
    assert not (tmp_path / "being" / "state.json").exists()


def test_an_error_that_quotes_a_lone_surrogate_holds_safe_text() -> None:
    document = b'{"schema_version": "singularity-mind-import-v1", "odd\\ud800": 1}'
    with pytest.raises(StateError) as refused:
        parse_import(document)
    assert REPLACEMENT in refused.value.message
    str(refused.value).encode("utf-8")  # strict: it can be printed, journaled and sent
