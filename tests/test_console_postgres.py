"""The console over a PostgreSQL state store: `singularity console --state-url postgresql://…`
as a process, on a real PostgreSQL, with httpx (and one check in Debian's Chromium).

Contract: the fleet lists every being of the store (status, cycle, model, balance,
earned, spent, children, last action; live while a runtime holds its lease), a child
under its parent; a being's page shows what the store holds (identity, the ledger's
chart, mind, memories with search, conversation, activity, family); the fleet stream
follows a step committed meanwhile, and the fleet a being living there (`run
--state-url`) until it stops; a store that went away is a 503 until it is back. Operator requests travel through a being's state
directory, which the store does not record: each is refused with 409 and a message
saying so, never a 500. The guard (Host, Origin, CSRF, token) is the same as over a
directory.
"""

from __future__ import annotations

import re
import signal
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import psycopg
import pytest

from singularity.config import resolve
from singularity.domain.identity import identity_from
from singularity.domain.records import ActionRecord, ChildRecord, MemoryEntry
from singularity.domain.state import AgentState
from singularity.sanctum.entries import SanctumEntry
from singularity.store.base import Event
from singularity.store.postgres.sanctum import add_versions
from singularity.store.postgres.store import Batch, PostgresStore, connect
from tests.support.children_gateway import no_plan
from tests.support.console import Console, ConsoleGateway, chromium
from tests.support.living import Process, wait_until
from tests.support.loop_http import Result, cli_args
from tests.support.polling import wait_for
from tests.support.postgres import postgres_server, start_server

AT = "2026-12-01T10:00:00Z"
TOKEN = "a-long-console-token-for-tests"
COAST = b"# The coast\n\nIt bends **west**.\n"
OUT_OF_REACH = "lives in the PostgreSQL state store, which does not record where its state"
HTTP_SECS = 60.0  # a console under load answers in seconds, not httpx's default 5


def a_being(agent_id: str, name: str, ticker: str) -> AgentState:
    settings = resolve(
        {
            "state_dir": "/nonexistent",
            "agent_id": agent_id,
            "agent_name": name,
            "agent_ticker": ticker,
        },
        environ={},
    )
    return AgentState.new(identity_from(settings), "scripted-model", Decimal("10"), AT)


def a_step(state: AgentState, memory: str, cost: str) -> list[Event]:
    """One remembering tool call and its debit, as the loop journals them."""
    state.cycle += 1
    state.record_action(ActionRecord(cycle=state.cycle, tool="remember", status="success", at=AT))
    state.mind.remember(MemoryEntry(id=str(uuid.uuid4()), kind="note", text=memory, created_at=AT))
    state.conversation.append({"role": "assistant", "content": f"I remembered {memory}."})
    state.budget.remaining -= Decimal(cost)
    state.budget.api_spent += Decimal(cost)
    state.status = "running"
    return [
        {"type": "cycle_started", "at": AT, "cycle": state.cycle},
        {"type": "cost_debited", "at": AT, "cycle": state.cycle, "amount": cost},
        {"type": "tool_finished", "at": AT, "cycle": state.cycle, "tool": "remember"},
    ]


@dataclass
class Fleet:
    url: str
    ada: PostgresStore
    """Held open: Ada's lease is held, she is live."""
    ada_state: AgentState


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    """A database of its own with Ada (held) and her child Byron (stopped)."""
    server = postgres_server()
    name = f"console_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = server.url.rsplit("/", 1)[0] + f"/{name}"
    byron = PostgresStore.open(url, "byron")
    byron_state = a_being("byron", "Byron", "BYR")
    byron.commit(byron_state, a_step(byron_state, "poems are maps", "0.25"))
    byron_state.status = "stopped"
    byron.commit(byron_state, [])
    byron.close()
    ada = PostgresStore.open(url, "ada")
    state = a_being("ada", "Ada", "ADA")
    state.mind.children.append(
        ChildRecord(
            id="byron",
            name="Byron",
            ticker="BYR",
            state_dir="/elsewhere/byron",
            created_at=AT,
            status="active",
        )
    )
    ada.commit(state, a_step(state, "the coast bends west", "0.5"))
    ada.commit(state, a_step(state, "a lighthouse at the cape", "0.125"))
    db = connect(url)
    batch = Batch(db)
    add_versions(batch, "ada", [SanctumEntry("notes/"), SanctumEntry("notes/coast.md", COAST)])
    batch.run()
    db.close()
    try:
        yield Fleet(url, ada, state)
    finally:
        ada.close()


@pytest.fixture
def consoles(tmp_path: Path) -> Iterator[Callable[..., Console]]:
    started: list[Console] = []

    def start(url: str, *flags: str) -> Console:
        log = tmp_path / f"console-{len(started)}.txt"
        console = Console(tmp_path, log, *flags, state_url=url)
        started.append(console)
        return console

    yield start
    for console in started:
        console.stop()


def _row(html: str, key: str) -> str:
    found = re.search(rf'<tr data-key="{key}" class="(depth-\d)">(.*?)</tr>', html, re.DOTALL)
    assert found is not None, html
    return " ".join([found.group(1), *re.sub(r"<[^>]+>", " ", found.group(2)).split()])


def test_the_fleet_lists_every_being_of_the_store_live_or_not(
    fleet: Fleet, consoles: Callable[..., Console]
) -> None:
    with httpx.Client(timeout=HTTP_SECS, base_url=consoles(fleet.url).url) as client:
        page = client.get("/")
    assert page.status_code == 200
    assert "PostgreSQL state store postgresql://postgres@127.0.0.1:" in page.text
    ada, byron = _row(page.text, "ada"), _row(page.text, "byron")
    assert page.text.index('data-key="ada"') < page.text.index('data-key="byron"')
    assert ada == "depth-0 Ada ADA running 2 scripted-model 9.375 0 0.625 1 remember: success ●"
    assert byron == "depth-1 Byron BYR stopped 1 scripted-model 9.75 0 0.25 0 remember: success ○"


def test_a_beings_page_shows_what_the_store_holds(
    fleet: Fleet, consoles: Callable[..., Console]
) -> None:
    with httpx.Client(timeout=HTTP_SECS, base_url=consoles(fleet.url).url) as client:
        page = client.get("/b/ada")
        found = client.get("/b/ada/memories", params={"q": "LIGHTHOUSE"})
        child = client.get("/b/byron")
        missing = client.get("/b/nobody")
    assert page.status_code == 200
    text = page.text
    assert "<code>ada</code>" in text  # the identity
    assert "Balance after each of 2 ledger entries, from 9.375 to 10 USD." in text
    assert "the coast bends west" in text and "a lighthouse at the cape" in text
    assert "I remembered a lighthouse at the cape." in text  # the conversation
    assert "cost_debited" in text  # the activity
    assert '<a href="/b/byron">Byron</a>' in text  # the family, linked to the child's page
    assert OUT_OF_REACH in text
    assert 'id="chat-send"' not in text and 'id="topup-send"' not in text
    assert 'id="pause"' not in text
    assert "a lighthouse at the cape" in found.text and "the coast bends west" not in found.text
    assert child.status_code == 200 and "poems are maps" in child.text
    assert "The store holds no sanctum of this being" in child.text
    assert '<a href="/b/ada/sanctum?path=notes/coast.md">notes/coast.md</a>' in text
    assert "As the store holds it: read only here" in text
    assert missing.status_code == 404


def test_operator_requests_are_refused_with_what_to_do_instead(
    fleet: Fleet, consoles: Callable[..., Console]
) -> None:
    url = consoles(fleet.url).url
    with httpx.Client(timeout=HTTP_SECS, base_url=url) as client:
        page = client.get("/b/ada")
        token = re.search(r'"x-csrf-token": "([0-9a-f]{64})"', page.text)
        assert token is not None
        own = {"Origin": url, "X-CSRF-Token": token.group(1)}
        assert client.post("/b/ada/say", data={"text": "hi"}).status_code == 403  # no CSRF
        requests = [
            ("/b/ada/say", {"text": "hello"}),
            ("/b/ada/control", {"action": "pause"}),
            ("/b/ada/control", {"action": "stop"}),
            ("/b/ada/topup", {"amount": "5", "note": "more"}),
            ("/b/ada/sanctum/save", {"path": "PERSONA.md", "text": "x"}),
            ("/b/ada/review", {"proposal_id": "p", "decision": "approve"}),
        ]
        for path, form in requests:
            refused = client.post(path, data=form, headers=own)
            assert refused.status_code == 409, (path, refused.text)
            assert "ada " + OUT_OF_REACH in refused.text
            assert "so this console cannot hand them to the being" in refused.text
        assert client.post("/b/nobody/say", data={"text": "x"}, headers=own).status_code == 404
        sanctum = client.get("/b/ada/sanctum", params={"path": "notes/coast.md"})
        assert sanctum.status_code == 200 and OUT_OF_REACH in sanctum.text
        assert "It bends <strong>west</strong>." in sanctum.text  # read from the store's rows
        assert 'id="sanctum-text"' not in sanctum.text  # and not editable


def test_the_fleet_stream_follows_a_step_committed_meanwhile(
    fleet: Fleet, consoles: Callable[..., Console]
) -> None:
    url = consoles(fleet.url).url
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(HTTP_SECS)) as client,
        client.stream("GET", "/events/fleet") as stream,
    ):
        assert stream.status_code == 200
        lines = stream.iter_lines()
        assert next(lines) == "event: fleet"
        fleet.ada.commit(fleet.ada_state, a_step(fleet.ada_state, "tide tables", "0.375"))
        for line in lines:
            if 'class="num cycle">3<' in line:
                break  # the table shows Ada's third cycle


def test_a_being_living_in_the_store_is_followed_talked_to_and_stopped(
    tmp_path: Path, fleet: Fleet, consoles: Callable[..., Console]
) -> None:
    with ConsoleGateway(no_plan) as gateway:
        flags = [
            *cli_args(tmp_path, gateway, "--cycle-interval-secs", "0.2"),
            *("--state-url", fleet.url, "--agent-id", "cleo"),
            *("--agent-name", "Cleo", "--agent-ticker", "CLE"),
        ]
        cleo = Process(["run", *flags], tmp_path, tmp_path / "cleo.txt")
        try:
            url = consoles(fleet.url).url
            with httpx.Client(timeout=HTTP_SECS, base_url=url) as client:

                def row() -> list[str]:
                    page = client.get("/").text
                    return _row(page, "cleo").split() if 'data-key="cleo"' in page else []

                def living() -> bool:
                    shown = row()
                    return bool(shown) and shown[3] == "running" and int(shown[4]) >= 2

                wait_until(living, "Cleo's second cycle in the fleet", cleo)
                assert row()[-1] == "●"
                page = client.get("/b/cleo")
                assert OUT_OF_REACH not in page.text and 'id="chat-send"' in page.text
                token = re.search(r'"x-csrf-token": "([0-9a-f]{64})"', page.text)
                assert token is not None
                own = {"Origin": url, "X-CSRF-Token": token.group(1)}
                said = client.post("/b/cleo/say", data={"text": "hello Cleo"}, headers=own)
                assert said.status_code == 200 and "Sent: message of 10 bytes" in said.text
                credited = client.post("/b/cleo/topup", data={"amount": "5"}, headers=own)
                assert credited.status_code == 200, credited.text
                wait_until(
                    lambda: "Heard you: hello Cleo" in client.get("/b/cleo").text,
                    "Cleo's reply on her page",
                    cleo,
                )
                wait_until(
                    lambda: "Operator credits</th><td>5 USD" in client.get("/b/cleo").text,
                    "the top-up in Cleo's budget",
                    cleo,
                )
                cleo.process.send_signal(signal.SIGTERM)
                assert cleo.wait() == 0, cleo.stderr()
                wait_until(lambda: row()[3] == "stopped" and row()[-1] == "○", "Cleo stopped")
                stop = client.post("/b/cleo/control", data={"action": "stop"}, headers=own)
                assert "the being is not running; there is nothing to stop" in stop.text
        finally:
            cleo.stop()


def test_a_state_directory_on_another_host_is_out_of_reach(
    fleet: Fleet, consoles: Callable[..., Console]
) -> None:
    with psycopg.connect(fleet.url, autocommit=True) as db:
        db.execute(
            "INSERT INTO singularity.places (agent_id, host, state_dir) "
            "VALUES ('byron', 'elsewhere.example', '/srv/byron')"
        )
    url = consoles(fleet.url).url
    with httpx.Client(timeout=HTTP_SECS, base_url=url) as client:
        page = client.get("/b/byron")
        assert "byron keeps its state directory /srv/byron on host elsewhere.example" in page.text
        token = re.search(r'"x-csrf-token": "([0-9a-f]{64})"', page.text)
        assert token is not None
        own = {"Origin": url, "X-CSRF-Token": token.group(1)}
        refused = client.post("/b/byron/say", data={"text": "hi"}, headers=own)
        assert refused.status_code == 409 and "on host elsewhere.example" in refused.text


def test_the_guard_applies_over_a_store_as_over_a_directory(
    tmp_path: Path, fleet: Fleet, consoles: Callable[..., Console], cli: Callable[..., Result]
) -> None:
    url = consoles(fleet.url).url
    port = url.rsplit(":", 1)[1]
    with httpx.Client(timeout=HTTP_SECS, base_url=url) as client:
        assert client.get("/", headers={"Host": f"attacker.example:{port}"}).status_code == 403
        assert client.get("/events/fleet", headers={"Host": "attacker.example"}).status_code == 403
        assert (
            client.get("/b/ada", headers={"Origin": "http://attacker.example"}).status_code == 403
        )
    refused = cli("console", "--state-url", fleet.url, "--host", "0.0.0.0", "--port", "0")
    assert refused.code == 2 and "beyond loopback: give it --token-file" in refused.err
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    guarded = consoles(fleet.url, "--host", "0.0.0.0", "--token-file", str(token_file)).url
    with httpx.Client(timeout=HTTP_SECS, base_url=guarded) as client:
        assert client.get("/events/fleet").status_code == 401
        assert client.get("/b/ada").status_code == 401
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert client.get("/", headers=bearer).status_code == 200
        with client.stream("GET", "/events/fleet", headers=bearer) as stream:
            assert stream.status_code == 200
            assert next(stream.iter_lines()) == "event: fleet"


def test_the_place_to_serve_is_one_and_reachable(
    tmp_path: Path, cli: Callable[..., Result]
) -> None:
    both = cli("console", "--root", str(tmp_path), "--state-url", "postgresql://127.0.0.1/x")
    assert (both.code, both.err) == (
        2,
        "singularity: configuration: --root and --state-url name two places to serve; give one\n",
    )
    folder = cli("console", "--state-url", f"file://{tmp_path}/none", "--port", "0")
    assert folder.code == 4 and f"console root is not a directory: {tmp_path}/none" in folder.err
    unknown = cli("console", "--state-url", "mysql://127.0.0.1/x")
    assert unknown.code == 2 and "unknown scheme 'mysql'" in unknown.err
    closed = postgres_server().url.rsplit(":", 1)[0] + ":1/postgres"
    unreachable = cli("console", "--state-url", closed, "--port", "0")
    assert unreachable.code == 4
    assert "cannot connect to the state store postgresql://postgres@127.0.0.1:1/" in (
        unreachable.err
    )


def test_a_store_that_went_away_is_answered_503_until_it_is_back(
    consoles: Callable[..., Console],
) -> None:
    server = start_server()  # a server of its own: this test stops it
    try:
        store = PostgresStore.open(server.url, "ada")
        state = a_being("ada", "Ada", "ADA")
        store.commit(state, a_step(state, "the coast bends west", "0.5"))
        store.close()
        with httpx.Client(timeout=HTTP_SECS, base_url=consoles(server.url).url) as client:
            assert client.get("/").status_code == 200
            server.halt()
            wait_for(lambda: client.get("/").status_code == 503, "the console to see the outage")
            down = client.get("/")
            assert "the state store postgresql://postgres@127.0.0.1:" in down.text
            assert client.get("/b/ada").status_code == 503
            server.resume()
            wait_for(lambda: client.get("/").status_code == 200, "the console to read again")
            assert 'data-key="ada"' in client.get("/").text
    finally:
        server.stop()


def test_the_fleet_table_shows_both_beings_in_a_browser(
    fleet: Fleet, consoles: Callable[..., Console]
) -> None:
    url = consoles(fleet.url).url
    with chromium() as browser:
        page = browser.new_page()
        page.goto(url + "/")
        page.wait_for_selector('tr[data-key="byron"]')
        names = page.locator("#fleet-rows td.being a").all_inner_texts()
        assert names == ["Ada", "Byron"]
        assert page.locator('tr[data-key="ada"] .live.on').count() == 1
        assert page.locator('tr[data-key="byron"] .live.off').count() == 1
