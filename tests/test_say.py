"""`singularity say` and `singularity log` through the CLI, against real beings.

Contract: `say` hands a message to a living `run` through its local socket (which wakes
it from its sleep) or, for a stopped being, queues it durably in the inbox; the message
reaches the next cycle right after the framing message as a `user` message named
`operator`, and is journaled (`operator_message` with its request id, cycle and size,
never its text). `say --wait` prints the being's plain reply of that cycle. `log` prints
the whole conversation, archived messages included, with tool calls, their outcomes as
the model saw them and each round's cost; `--json` prints one object a line; `--follow`
keeps printing as the being lives.

A being in a PostgreSQL store (`--state-url`, `--agent-id`) is talked to through the
state directory its runtime recorded there (refused, saying why, when none is recorded),
and its transcript is read from the store without its lease.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from singularity.store.opening import StorePlace, open_store_at, peek_events_at
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.living import Process, wait_until
from tests.support.loop_http import Result, all_events, boot, cli_args, run, state_of
from tests.support.stores import a_being, live_a_step, store_url

PRICES = ("--input-price", "1", "--output-price", "2")
QUESTION = "What is two and two?"
OPERATOR_TEXT = f"Message from your operator: {QUESTION}"


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


def inbox_files(root: Path) -> list[str]:
    folder = root / "being" / "inbox"
    return (
        sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
        if folder.exists()
        else []
    )


def of_type(root: Path, kind: str) -> list[dict[str, object]]:
    """The journal's events of one type; none while the being has not started yet."""
    if not (root / "being" / "activity.jsonl").exists():
        return []
    return [event for event in all_events(root) if event["type"] == kind]


def test_a_message_to_a_stopped_being_reaches_its_next_start(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    with ScriptedServer([Turn.text("first life"), Turn.text("four")]) as server:
        assert cli("once", *cli_args(tmp_path, server, *PRICES)).code == 0
        said = cli("say", "--state-dir", str(tmp_path / "being"), QUESTION)
        assert said.code == 0, said.err
        receipt = json.loads(said.out)
        assert receipt["route"] == "inbox"
        assert len(inbox_files(tmp_path)) == 1
        assert state_of(tmp_path).conversation[-1]["content"] == "first life"
        second = cli("once", "--resume", *cli_args(tmp_path, server, *PRICES))
        requests = server.completions
    assert second.code == 0, second.err
    messages = requests[1].json["messages"]
    assert messages[-2]["content"].startswith("Begin autonomous cycle 2. ")
    assert messages[-1] == {"role": "user", "name": "operator", "content": OPERATOR_TEXT}
    assert json.loads(second.out)["final_content"] == "four"
    delivered = of_type(tmp_path, "operator_message")
    assert delivered == [
        {
            "type": "operator_message",
            "at": delivered[0]["at"],
            "cycle": 2,
            "request_id": receipt["request_id"],
            "bytes": len(QUESTION),
        }
    ]
    assert QUESTION not in (tmp_path / "being" / "activity.jsonl").read_text()
    assert inbox_files(tmp_path) == []
    assert cli("verify", str(tmp_path / "being")).code == 0


def test_say_refuses_what_it_cannot_deliver(tmp_path: Path, cli: Callable[..., Result]) -> None:
    missing = cli("say", "--state-dir", str(tmp_path / "nobody"), "hello")
    assert missing.code == 4
    assert "no being state exists at" in missing.err
    with ScriptedServer() as server:
        assert cli("once", *cli_args(tmp_path, server)).code == 0
    empty = cli("say", "--state-dir", str(tmp_path / "being"), "   ")
    assert (empty.code, empty.err) == (
        4,
        "singularity: state: operator request: text must not be empty\n",
    )
    long = cli("say", "--state-dir", str(tmp_path / "being"), "x" * 16385)
    assert long.code == 4
    assert "text is longer than 16384 bytes" in long.err
    assert inbox_files(tmp_path) == []


class Lines:
    """The stdout lines of a process, read on a thread so a test can wait with a deadline."""

    def __init__(self, process: Process) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        stream = process.process.stdout
        assert stream is not None

        def pump() -> None:
            for raw in stream:
                self.lines.put(raw.decode("utf-8", "replace").rstrip("\n"))

        threading.Thread(target=pump, daemon=True).start()

    def until(self, wanted: str, process: Process) -> None:
        def arrived() -> bool:
            while not self.lines.empty():
                self.seen.append(self.lines.get())
            return wanted in self.seen

        wait_until(arrived, f"the line {wanted!r}", process)


def test_say_wait_prints_the_reply_of_a_living_being_and_log_follows(
    tmp_path: Path, cli: Callable[..., Result], processes: list[Process]
) -> None:
    remember = Turn.tool_call("singularity_memory_remember", {"kind": "note", "text": "asked"})
    script = [Turn.text("resting"), remember, Turn.text("four")]
    with ScriptedServer(script) as server:
        args = cli_args(tmp_path, server, *PRICES)
        args[args.index("--cycle-interval-secs") + 1] = "3600"
        being = Process(["run", *args, "--log-format", "json"], tmp_path, tmp_path / "run.txt")
        processes.append(being)
        wait_until(lambda: len(of_type(tmp_path, "cycle_finished")) == 1, "cycle 1", being)
        follow = Process(
            ["log", "--follow", "--state-dir", str(tmp_path / "being")],
            tmp_path,
            tmp_path / "log.txt",
        )
        processes.append(follow)
        lines = Lines(follow)
        lines.until("being: resting", follow)
        said = cli(
            "say", "--wait", "--timeout", "60", "--state-dir", str(tmp_path / "being"), QUESTION
        )
        requests = server.completions
        lines.until("being: four", follow)
        being.process.send_signal(signal.SIGTERM)
        assert being.wait() == 0, being.stderr()
    assert (said.code, said.out) == (0, "four\n"), said.err
    assert len(requests) == 3
    assert requests[1].json["messages"][-1] == {
        "role": "user",
        "name": "operator",
        "content": OPERATOR_TEXT,
    }
    assert of_type(tmp_path, "operator_message")[0]["cycle"] == 2
    printed = lines.seen
    assert "── cycle 2" in "\n".join(printed)
    assert f"operator: {QUESTION}" in printed
    assert any(
        line.startswith('  → singularity_memory_remember {"kind":"note"') for line in printed
    )
    assert any(
        line.startswith('  ← singularity_memory_remember success: {"memory_id":')
        for line in printed
    )
    assert sum(line.startswith("  · round cost ") for line in printed) == 3
    entries = [
        json.loads(line)
        for line in cli("log", "--json", "--state-dir", str(tmp_path / "being")).out.splitlines()
    ]
    assert [e["kind"] for e in entries if e["cycle"] == 2] == [
        "cycle",
        "framing",
        "operator",
        "call",
        "cost",
        "result",
        "being",
        "cost",
    ]
    costs = [e for e in entries if e["kind"] == "cost"]
    debits = of_type(tmp_path, "cost_debited")
    assert [c["amount"] for c in costs] == [d["amount"] for d in debits]
    usage = of_type(tmp_path, "model_completed")
    assert [c["prompt_tokens"] for c in costs] == [u["usage"]["prompt_tokens"] for u in usage]  # type: ignore[index]


def test_log_reads_the_archived_conversation_too(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    turns: list[Turn] = []
    for number in range(4):
        turns += [
            Turn.tool_call("singularity_self_add_rule", {"rule": f"rule {number}"}),
            Turn.text(f"done {number}"),
        ]

    async def live() -> None:
        async with ScriptedServer(turns) as server:
            runtime = boot(tmp_path, server)
            runtime.being.window_messages = 3
            try:
                for _ in range(4):
                    await runtime.once()
            finally:
                await runtime.shutdown()

    run(live())
    state = state_of(tmp_path)
    assert state.mind.conversation_archived > 0
    result = cli("log", "--json", "--state-dir", str(tmp_path / "being"))
    entries = [json.loads(line) for line in result.out.splitlines()]
    total = state.mind.conversation_archived + len(state.conversation)
    assert sorted({e["seq"] for e in entries}) == list(range(total))
    assert [e["text"] for e in entries if e["kind"] == "being"] == [f"done {n}" for n in range(4)]
    assert [e["cycle"] for e in entries if e["kind"] == "cycle"] == [1, 2, 3, 4]


def in_store(agent: str) -> list[str]:
    return ["--state-url", store_url(), "--agent-id", agent]


def stored_events(agent: str, kind: str) -> list[dict[str, object]]:
    place = StorePlace.parse(store_url())
    return [event for event in peek_events_at(place, agent) if event["type"] == kind]


def test_a_message_to_a_stopped_being_in_postgres_reaches_its_next_start(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    agent = f"agent-{uuid.uuid4().hex[:12]}"
    with ScriptedServer([Turn.text("first life"), Turn.text("four")]) as server:
        first = cli("once", *cli_args(tmp_path, server, *PRICES), *in_store(agent))
        assert first.code == 0, first.err
        said = cli("say", *in_store(agent), QUESTION)
        assert said.code == 0, said.err
        receipt = json.loads(said.out)
        assert receipt["route"] == "inbox" and len(inbox_files(tmp_path)) == 1
        again = cli("once", "--resume", *cli_args(tmp_path, server, *PRICES), *in_store(agent))
        requests = server.completions
    assert again.code == 0, again.err
    assert requests[1].json["messages"][-1] == {
        "role": "user",
        "name": "operator",
        "content": OPERATOR_TEXT,
    }
    assert json.loads(again.out)["final_content"] == "four"
    assert stored_events(agent, "operator_message")[0]["request_id"] == receipt["request_id"]
    assert inbox_files(tmp_path) == []
    printed = cli("log", *in_store(agent))
    assert printed.code == 0, printed.err
    lines = printed.out.splitlines()
    assert lines[0].startswith("── cycle 1 · ")
    assert "being: first life" in lines and f"operator: {QUESTION}" in lines
    assert lines[-2:] == ["being: four", lines[-1]] and lines[-1].startswith("  · round cost ")
    entries = [json.loads(line) for line in cli("log", "--json", *in_store(agent)).out.splitlines()]
    costs = [entry["amount"] for entry in entries if entry["kind"] == "cost"]
    assert costs == [event["amount"] for event in stored_events(agent, "cost_debited")]


def test_say_wait_prints_the_reply_of_a_being_living_in_postgres(
    tmp_path: Path, cli: Callable[..., Result], processes: list[Process]
) -> None:
    agent = f"agent-{uuid.uuid4().hex[:12]}"
    with ScriptedServer([Turn.text("resting"), Turn.text("four")]) as server:
        args = cli_args(tmp_path, server, *PRICES)
        args[args.index("--cycle-interval-secs") + 1] = "3600"
        being = Process(["run", *args, *in_store(agent)], tmp_path, tmp_path / "run.txt")
        processes.append(being)
        wait_until(lambda: len(stored_events(agent, "cycle_finished")) == 1, "cycle 1", being)
        said = cli("say", "--wait", "--timeout", "60", *in_store(agent), QUESTION)
        requests = server.completions
        being.process.send_signal(signal.SIGTERM)
        assert being.wait() == 0, being.stderr()
    assert (said.code, said.out) == (0, "four\n"), said.err
    assert requests[1].json["messages"][-1] == {
        "role": "user",
        "name": "operator",
        "content": OPERATOR_TEXT,
    }
    assert stored_events(agent, "operator_message")[0]["cycle"] == 2


def test_say_refuses_a_being_in_postgres_whose_state_directory_is_not_recorded(
    cli: Callable[..., Result],
) -> None:
    agent = f"agent-{uuid.uuid4().hex[:12]}"
    store = open_store_at(StorePlace.parse(store_url()), agent)
    state = a_being(agent)
    store.commit(state, live_a_step(state, 0))
    store.close()
    refused = cli("say", *in_store(agent), "hello")
    assert refused.code == 4
    assert (
        f"{agent} lives in the PostgreSQL state store, which does not record where its state "
        "directory is: messages go through that directory's inbox and socket" in refused.err
    )
    nobody = cli("say", *in_store("nobody-at-all"), "hello")
    assert nobody.code == 4 and "no being state exists for being nobody-at-all in" in nobody.err
    read = cli("log", "--json", *in_store(agent))
    assert read.code == 0, read.err
    entries = [json.loads(line) for line in read.out.splitlines()]
    assert [(entry["kind"], entry["tool"]) for entry in entries] == [
        ("call", "remember"),
        ("result", "remember"),
    ]
