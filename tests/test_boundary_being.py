"""The output boundary in a living being, in both modes, for each case of decision 21.

A being on the scripted gateway calls a real MCP server (`tests/servers/results.py`)
that answers with the result each case needs, and a built-in that fails with an OS
error; the next completion request shows what the model was given, compared byte for
byte. `strict` is spec §10.4 and §10.3 exactly (a rejected result is the two-key
content); `redact` (the default) rejects only on the size and depth limits and says
which, replaces secret-like values, private-key blocks and outside paths with markers,
shows workspace paths relative, keeps text that merely starts with a bracket, and says
how many values were replaced and why. The journal keeps each call's own status; the
terminal view shows the status the model was shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from singularity.jsoncodec import compact
from singularity.testing.scripted_server import Call, ScriptedServer, Turn
from tests.servers import RESULTS, stdio, write_skills
from tests.support.loop_http import Result, all_events, boot, cli_args, run, state_of

REJECTED = '{"error_code":"sensitive_output_rejected","status":"failed"}'
PEM = "-----BEGIN PRIVATE KEY-----\nMIIEcanary\n-----END PRIVATE KEY-----"


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def cases(ws: str) -> dict[str, tuple[str, dict[str, Any] | None]]:
    """Call id -> (text, structured content) the server answers with."""
    return {
        "listing": ("[FILE] hello.txt\n[DIR] notes", None),
        "slash": ("read / write access", None),
        "inside": (f"Successfully wrote to {ws}/hello.txt", None),
        "outside": ("see /etc/passwd", None),
        "secret": ("ok", {"api_token": "tok-canary", "n": 1}),
        "pem": (f"key:\n{PEM}\nend", None),
        "json": (json.dumps({"path": f"{ws}/a.txt"}), None),
        "notjson": ("{not json", None),
        "big": ("x" * 70000, None),
        "deep": (compact(_deep(9)), None),
    }


def _calls(ws: str) -> list[Call]:
    calls = []
    for call_id, (text, structured) in cases(ws).items():
        arguments: dict[str, str] = {"text": text}
        if structured is not None:
            arguments["structured"] = json.dumps(structured)
        calls.append(Call("results__give", json.dumps(arguments), call_id))
    calls.append(Call("singularity_file_read", '{"path": "missing.txt"}', "oserror"))
    return calls


def _text_result(text: str) -> str:
    return f'{{"content":[{{"text":{json.dumps(text, ensure_ascii=False)},"type":"text"}}],"isError":false}}'


def _success(content: str, redacted: str | None = None) -> str:
    note = f',"redacted":{redacted}' if redacted else ""
    return (
        f'{{"chat_id":null,"content":{content},"error_code":null,"message_id":null{note},'
        '"status":"success"}'
    )


OS_ERROR = (
    '{"chat_id":null,"content":{"message":"No such file or directory (os error 2)"},'
    '"error_code":"file_read","message_id":null,"status":"failed"}'
)


def _withheld(reason: str) -> str:
    return (
        '{"chat_id":null,"content":{"message":"the result was withheld by the output boundary '
        f'({reason}); the call ended success"}},"error_code":"output_rejected",'
        '"message_id":null,"status":"failed"}'
    )


def _live(tmp_path: Path, mode: str) -> dict[str, str]:
    """One cycle making every call; the tool messages of the next request, by call id."""
    ws = str(tmp_path / "ws")
    skills = write_skills(tmp_path / "skills.json", {"results": stdio(RESULTS)})
    script = [Turn.tool_calls(*_calls(ws)), Turn.text("done")]
    with ScriptedServer(script) as server:

        async def live() -> None:
            runtime = boot(
                tmp_path,
                server,
                skills_file=str(skills),
                mcp_timeout_secs="60",
                output_boundary=mode,
            )
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()

        run(live())
        messages = server.completions[1].json["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def test_strict_mode_is_the_spec_byte_for_byte(tmp_path: Path) -> None:
    seen = _live(tmp_path, "strict")
    assert seen == {**{call_id: REJECTED for call_id in cases("")}, "oserror": OS_ERROR}
    events = all_events(tmp_path)
    finished = {e["tool"] for e in events if e["type"] == "tool_finished"}
    assert finished == {"results__give", "singularity_file_read"}
    statuses = [e["status"] for e in events if e["type"] == "tool_finished"]
    assert statuses == ["success"] * len(cases("")) + ["failed"]  # the calls' own statuses
    bounded = [e for e in events if e["type"] == "output_bounded"]
    assert [(e["mode"], e["redactions"]) for e in bounded] == [("strict", {})] * len(cases(""))
    assert bounded[3]["rejection"] == "string contains a raw local path"


def test_redact_mode_replaces_explains_and_rejects_only_on_limits(tmp_path: Path) -> None:
    ws = str(tmp_path / "ws")
    seen = _live(tmp_path, "redact")
    relative = '{"count":1,"reasons":{"workspace path shown relative":1}}'
    assert seen == {
        "listing": _success(_text_result("[FILE] hello.txt\n[DIR] notes")),
        "slash": _success(_text_result("read / write access")),
        "inside": _success(_text_result("Successfully wrote to hello.txt"), relative),
        "outside": _success(
            _text_result("see <redacted: local path>"),
            '{"count":1,"reasons":{"local path outside the workspace":1}}',
        ),
        "secret": _success(
            '{"content":[{"text":"ok","type":"text"}],"isError":false,'
            '"structuredContent":{"api_token":"<redacted: secret-like key>","n":1}}',
            '{"count":1,"reasons":{"secret-like key":1}}',
        ),
        "pem": _success(
            _text_result("key:\n<redacted: private key>\nend"),
            '{"count":1,"reasons":{"private key block":1}}',
        ),
        "json": _success(_text_result('{"path":"a.txt"}'), relative),
        "notjson": _success(_text_result("{not json")),
        "big": _withheld("output exceeds 65536 bytes"),
        "deep": _withheld("nesting exceeds depth 8"),
        "oserror": OS_ERROR,
    }
    assert ws not in json.dumps(seen) and "tok-canary" not in json.dumps(seen)
    saved = json.dumps([m for m in state_of(tmp_path).conversation if m["role"] == "tool"])
    assert ws not in saved and "tok-canary" not in saved and "MIIEcanary" not in saved
    events = all_events(tmp_path)
    bounded = {
        e["rejection"] or next(iter(e["redactions"]))
        for e in events
        if e["type"] == "output_bounded"
    }
    assert bounded == {
        "workspace path shown relative",
        "local path outside the workspace",
        "secret-like key",
        "private key block",
        "output exceeds 65536 bytes",
        "nesting exceeds depth 8",
    }


@pytest.mark.parametrize("mode", ["redact", "strict"])
def test_the_live_view_shows_the_status_the_model_was_shown(
    tmp_path: Path, cli: Callable[..., Result], mode: str
) -> None:
    skills = write_skills(tmp_path / "skills.json", {"results": stdio(RESULTS)})
    big = json.dumps({"text": "x" * 70000})
    outside = json.dumps({"text": "see /etc/passwd"})
    calls = [Call("results__give", big, "big"), Call("results__give", outside, "outside")]
    with ScriptedServer([Turn.tool_calls(*calls), Turn.text("done")]) as server:
        args = cli_args(tmp_path, server, "--skills", str(skills), "--output-boundary", mode)
        result = cli("once", *args, SINGULARITY_MCP_TIMEOUT_SECS="60", COLUMNS="200")
    assert result.code == 0, result.err
    shown = [line.strip() for line in result.err.splitlines() if "→" in line]
    withheld = "(result withheld: output exceeds 65536 bytes; the call ended success)"
    if mode == "redact":
        assert shown == [
            f"→ results__give failed {withheld}",
            "→ results__give success (1 value redacted)",
        ]
    else:
        assert shown == [
            f"→ results__give failed {withheld}",
            "→ results__give failed (result withheld: string contains a raw local path; "
            "the call ended success)",
        ]
