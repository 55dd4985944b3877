"""The console's guard over real HTTP: `singularity console` as a process, httpx as the client.

Contract: on loopback the console answers only requests whose `Host` is its own loopback
address (DNS rebinding) and whose `Origin`, when sent, is its own; every state-changing
request needs the page's CSRF token with the session cookie it was derived from and an
own `Origin` or `Referer`. Beyond loopback it refuses to start without `--token-file`,
and then every request (the event stream included) needs the token, as a bearer header
or the login cookie. Pages never show the private journal's text. (Over a PostgreSQL
state store: tests/test_console_postgres.py.)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.console import Console
from tests.support.loop_http import Result, cli_args

TOKEN = "a-long-console-token-for-tests"
CANARY = "private-canary-7f3a"
HTTP_SECS = 60.0  # a console under load answers in seconds, not httpx's default 5


@pytest.fixture
def being(tmp_path: Path, cli: Callable[..., Result]) -> Path:
    """A stopped being that wrote one private journal entry."""
    turns = [
        Turn.tool_call("singularity_journal_write", {"text": CANARY, "mood": "curious"}),
        Turn.text("noted privately"),
    ]
    with ScriptedServer(turns) as server:
        result = cli("once", *cli_args(tmp_path, server), "--journal-embedder", "hashing")
    assert result.code == 0, result.err
    return tmp_path / "being"


@pytest.fixture
def consoles(tmp_path: Path) -> Iterator[Callable[..., Console]]:
    started: list[Console] = []

    def start(*flags: str) -> Console:
        console = Console(tmp_path, tmp_path / f"console-{len(started)}.txt", *flags)
        started.append(console)
        return console

    yield start
    for console in started:
        console.stop()


def _host(url: str) -> str:
    return url.removeprefix("http://")


def test_a_loopback_console_answers_only_its_own_host_and_origin(
    being: Path, consoles: Callable[..., Console]
) -> None:
    url = consoles().url
    port = url.rsplit(":", 1)[1]
    with httpx.Client(timeout=HTTP_SECS, base_url=url) as client:
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"Host": f"localhost:{port}"}).status_code == 200
        rebound = client.get("/", headers={"Host": f"attacker.example:{port}"})
        assert (rebound.status_code, rebound.text) == (
            403,
            "this console answers only to its own loopback address\n",
        )
        assert client.get("/events/fleet", headers={"Host": "attacker.example"}).status_code == 403
        foreign = client.get("/", headers={"Origin": "http://attacker.example"})
        assert foreign.status_code == 403
        page = client.get("/b/being")
        assert page.status_code == 200
        assert page.headers["content-security-policy"].startswith("default-src 'self'")
        assert CANARY not in page.text
        assert "Entries written</th><td>1</td>" in page.text.replace("\n", "")


def test_state_changing_requests_need_the_csrf_token_and_an_own_origin(
    being: Path, consoles: Callable[..., Console]
) -> None:
    url = consoles().url
    with httpx.Client(timeout=HTTP_SECS, base_url=url) as client:
        page = client.get("/b/being")
        token = re.search(r'"x-csrf-token": "([0-9a-f]{64})"', page.text)
        assert token is not None
        own = {"Origin": url, "X-CSRF-Token": token.group(1)}
        missing = client.post("/b/being/say", data={"text": "hi"}, headers={"Origin": url})
        assert missing.status_code == 403
        wrong = client.post(
            "/b/being/say", data={"text": "hi"}, headers={**own, "X-CSRF-Token": "0" * 64}
        )
        assert wrong.status_code == 403
        foreign = client.post(
            "/b/being/say", data={"text": "hi"}, headers={**own, "Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403
        no_origin = client.post(
            "/b/being/say", data={"text": "hi"}, headers={"X-CSRF-Token": token.group(1)}
        )
        assert no_origin.status_code == 403
        sent = client.post("/b/being/say", data={"text": "hello there"}, headers=own)
        assert sent.status_code == 200
        assert "Queued: message of 11 bytes" in sent.text
        bad = client.post("/b/being/topup", data={"amount": "-3"}, headers=own)
        assert "amount must be more than zero" in bad.text
        assert client.get("/b/..~etc").status_code == 404
    queued = sorted((being / "inbox").iterdir())
    assert len(queued) == 1
    assert json.loads(queued[0].read_text())["text"] == "hello there"


def test_beyond_loopback_the_console_needs_its_token_on_every_request(
    tmp_path: Path, being: Path, consoles: Callable[..., Console], cli: Callable[..., Result]
) -> None:
    refused = cli("console", "--root", str(tmp_path), "--host", "0.0.0.0", "--port", "0")
    assert refused.code == 2
    assert "beyond loopback: give it --token-file" in refused.err
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o644)
    loose = cli("console", "--root", str(tmp_path), "--token-file", str(token_file))
    assert (loose.code, "readable by others") == (2, "readable by others")
    assert "readable by others; chmod 600 it" in loose.err
    os.chmod(token_file, 0o600)
    url = consoles("--host", "0.0.0.0", "--token-file", str(token_file)).url
    with httpx.Client(timeout=HTTP_SECS, base_url=url) as client:
        assert client.get("/events/fleet").status_code == 401
        assert client.get("/b/being", headers={"Accept": "text/html"}).status_code == 401
        assert client.get("/login").status_code == 200
        assert (
            client.post("/login", data={"token": "wrong"}, headers={"Origin": url}).status_code
            == 401
        )
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert client.get("/", headers=bearer).status_code == 200
        logged = client.post("/login", data={"token": TOKEN}, headers={"Origin": url})
        assert logged.status_code == 303
        assert TOKEN not in logged.headers["set-cookie"]
        with client.stream("GET", "/events/fleet") as stream:
            assert stream.status_code == 200
            first = next(stream.iter_lines())
        assert first == "event: fleet"
