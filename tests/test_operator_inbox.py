"""The operator inbox: each request applied exactly once, whatever crash comes between.

Contract: a request in `<state-dir>/inbox/` is applied by the being's own runtime and
journaled with its request id before the save that makes it durable; a message (and a
review decision) counts as applied only once the opening save of its cycle happened, so
a crash between the journal and that save delivers it again in the relived cycle; a
credit is a ledger entry that a resume applies once; a file whose request is applied is
removed at the next safe point, and a crash before the removal never applies it twice.
With `--review-self-edits` a prompt replacement, rule or learning waits for an operator
decision and reaches the mind only when approved. Bad requests are refused with a
journaled reason and change nothing. The runs are real processes killed with SIGKILL at
the named failpoints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from singularity.domain.operator import new_request, sha256_text
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.runtime.talk.operator_client import deliver
from singularity.storage.inbox import post_at
from singularity.testing.scripted_server import ScriptedServer, Turn
from singularity.timestamps import now_text
from tests.support.commands import clean_environment
from tests.support.failpoints import armed_environment
from tests.support.living import Process
from tests.support.loop_http import Result, all_events, cli_args, state_of
from tests.support.syncs import SyncLog

QUESTION = "Where is the lighthouse?"


def once(root: Path, server: ScriptedServer, *extra: str, failpoints: str = "") -> int:
    """`singularity once --resume` as a process; its exit code (-9 when a failpoint killed it)."""
    env = armed_environment(failpoints, clean_environment()) if failpoints else {}
    process = Process(
        ["once", "--resume", *cli_args(root, server, *extra)], root, root / "once.txt", env
    )
    try:
        return process.wait()
    finally:
        process.stop()


def of_type(root: Path, kind: str) -> list[dict[str, Any]]:
    return [event for event in all_events(root) if event["type"] == kind]


def pending(root: Path) -> list[str]:
    folder = root / "being" / "inbox"
    return (
        sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
        if folder.exists()
        else []
    )


def born(root: Path, server: ScriptedServer, cli: Callable[..., Result], *extra: str) -> None:
    result = cli("once", *cli_args(root, server, *extra))
    assert result.code == 0, result.err


def operator_messages(request: Any) -> list[dict[str, Any]]:
    return [m for m in request.json["messages"] if m.get("name") == "operator"]


def test_a_crash_before_the_opening_save_delivers_the_message_again(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer() as server:
        born(tmp_path, server, cli)
        request = new_request("message", now_text(), text=QUESTION)
        assert deliver(str(tmp_path / "being"), request).route == "inbox"
        # Steps of a resumed `once`: `started`, then the opening of cycle 2, killed before
        # its record: nothing of that step is durable, the message waits in the inbox.
        assert once(tmp_path, server, failpoints="redo.write=kill@2") == -9
        assert state_of(tmp_path).cycle == 1
        assert of_type(tmp_path, "operator_message") == []
        assert len(pending(tmp_path)) == 1
        assert server.completions[-1].json["messages"][-1].get("name") != "operator"
        assert once(tmp_path, server) == 0
        last = server.completions[-1]
    assert operator_messages(last) == [
        {"role": "user", "name": "operator", "content": f"Message from your operator: {QUESTION}"}
    ]
    assert [(e["cycle"], e["request_id"]) for e in of_type(tmp_path, "operator_message")] == [
        (2, request.id),
    ]
    conversation = state_of(tmp_path).conversation
    assert sum(m.get("name") == "operator" for m in conversation) == 1
    assert pending(tmp_path) == []
    assert verify_state_dir(str(tmp_path / "being")) == []


def test_a_crash_after_a_credit_is_journaled_credits_it_once(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer() as server:
        born(tmp_path, server, cli, "--output-price", "1")
        before = state_of(tmp_path).budget
        request = new_request("credit", now_text(), amount=Decimal("2.5"), note="for the trip")
        deliver(str(tmp_path / "being"), request)
        # Steps: `started`, then the credit's, killed before its record.
        assert once(tmp_path, server, "--output-price", "1", failpoints="redo.write=kill@2") == -9
        assert state_of(tmp_path).budget.operator_credited == 0
        assert once(tmp_path, server, "--output-price", "1") == 0
    budget = state_of(tmp_path).budget
    assert budget.operator_credited == Decimal("2.5")
    assert budget.earned == before.earned == 0
    credits = of_type(tmp_path, "operator_credited")
    assert [(c["amount"], c["request_id"], c["note"]) for c in credits] == [
        ("2.5", request.id, "for the trip")
    ]
    assert pending(tmp_path) == []
    assert verify_state_dir(str(tmp_path / "being")) == []


def test_a_crash_before_the_inbox_file_is_removed_never_applies_it_twice(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer() as server:
        born(tmp_path, server, cli)
        deliver(str(tmp_path / "being"), new_request("credit", now_text(), amount=Decimal(1)))
        assert once(tmp_path, server, failpoints="inbox.unlink=kill@1") == -9
        assert len(pending(tmp_path)) == 1
        assert once(tmp_path, server) == 0
    assert len(of_type(tmp_path, "operator_credited")) == 1
    assert state_of(tmp_path).budget.operator_credited == 1
    assert pending(tmp_path) == []


def test_self_edits_wait_for_the_operator_under_review(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    script = [
        Turn.tool_call("singularity_self_add_rule", {"rule": "map only by daylight"}),
        Turn.text("proposed"),
        Turn.tool_call("singularity_self_add_learning", {"learning": "fog hides rocks"}),
        Turn.text("proposed again"),
    ]
    with ScriptedServer(script) as server:
        born(tmp_path, server, cli, "--review-self-edits")
        assert state_of(tmp_path).mind.rules == []
        proposals = of_type(tmp_path, "self_edit_proposed")
        assert [(p["tool"], p["text"]) for p in proposals] == [
            ("singularity_self_add_rule", "map only by daylight")
        ]
        result = json.loads(state_of(tmp_path).conversation[2]["content"])
        assert result["content"] == {
            "pending_operator_review": True,
            "proposal_id": proposals[0]["proposal_id"],
        }
        state_dir = str(tmp_path / "being")
        approve = new_request(
            "review", now_text(), proposal_id=proposals[0]["proposal_id"], decision="approve"
        )
        deliver(state_dir, approve)
        assert once(tmp_path, server, "--review-self-edits") == 0
        second = server.completions[2].json["messages"]
        learning = of_type(tmp_path, "self_edit_proposed")[1]["proposal_id"]
        deliver(
            state_dir, new_request("review", now_text(), proposal_id=learning, decision="refuse")
        )
        deliver(
            state_dir, new_request("review", now_text(), proposal_id=learning, decision="approve")
        )
        assert once(tmp_path, server, "--review-self-edits") == 0
    assert "Self-imposed rules:\n- map only by daylight" in second[0]["content"]
    assert "approved it" in operator_messages(server.completions[2])[0]["content"]
    mind = state_of(tmp_path).mind
    assert (mind.rules, mind.learnings) == (["map only by daylight"], [])
    decided = [(e["proposal_id"], e["decision"]) for e in of_type(tmp_path, "self_edit_decided")]
    assert decided == [(proposals[0]["proposal_id"], "approved"), (learning, "refused")]
    refused = of_type(tmp_path, "operator_request_refused")
    assert [r["kind"] for r in refused] == ["review"]
    assert verify_state_dir(str(tmp_path / "being")) == []


def test_bad_requests_are_refused_and_change_nothing(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer() as server:
        born(tmp_path, server, cli)
        state_dir = str(tmp_path / "being")
        persona = tmp_path / "being" / "sanctum" / "PERSONA.md"
        original = persona.read_text()
        stale = new_request(
            "sanctum_write", now_text(), path="PERSONA.md", text="mine", base_sha256="0" * 64
        )
        deliver(state_dir, stale)
        outside = new_request(
            "sanctum_write", now_text(), path="../state.json", text="{}", base_sha256=None
        )
        deliver(state_dir, outside)
        fresh = new_request(
            "sanctum_write",
            now_text(),
            path="PERSONA.md",
            text=original + "\nNew line.\n",
            base_sha256=sha256_text(original),
        )
        deliver(state_dir, fresh)
        (
            tmp_path / "being" / "inbox" / f"{'9' * 20}-{'0' * 8}-0000-4000-8000-{'0' * 12}.json"
        ).write_text("{")
        with pytest.raises(Exception, match="the being is not running; there is nothing to stop"):
            deliver(state_dir, new_request("stop", now_text()))
        assert once(tmp_path, server) == 0
    refused = of_type(tmp_path, "operator_request_refused")
    assert [(r["request_id"], r["reason"].split(":")[0]) for r in refused] == [
        (stale.id, "PERSONA.md"),
        (outside.id, "../state.json"),
    ]
    assert "the file changed since the edit began" in refused[0]["reason"]
    written = of_type(tmp_path, "operator_sanctum_written")
    assert [(w["request_id"], w["sha256_before"]) for w in written] == [
        (fresh.id, sha256_text(original))
    ]
    assert persona.read_text() == original + "\nNew line.\n"
    warnings = [w["message"] for w in of_type(tmp_path, "warning")]
    assert any(m.startswith("unreadable inbox file 99999999999999999999-") for m in warnings)
    assert pending(tmp_path) == []


def test_a_posted_request_is_synced_with_its_folder(
    tmp_path: Path, cli: Callable[..., Result], sync_log: SyncLog
) -> None:
    with ScriptedServer() as server:
        born(tmp_path, server, cli)
    request = new_request("message", now_text(), text=QUESTION)
    name = post_at(str(tmp_path / "being"), request)
    assert sync_log.problems(tmp_path / "being" / "inbox") == []
    assert [s.name for s in sync_log.of(tmp_path / "being" / "inbox" / name)] == ["inbox.fsync"]
