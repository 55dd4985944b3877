"""The runtime's own secrets never travel (decision 32), against upstreams that echo them.

Contract: the Brama API key and HMAC secret, the Most token and the journal's keys are
replaced by `[secret withheld]` in everything the runtime writes: journal events, logs,
stderr, stdout, tool results, error messages, prompts, `state.json`, every file of the
state directory and the workspace. Each canary is searched in its plain, JSON-escaped
and base64 form. The upstreams here are hostile: the gateway echoes the request headers
in an error body and puts every canary it knows into its answers (a gateway that checks
HMAC knows the secret), and the Most server echoes its bearer token in its answers. Two
real `singularity` processes live against them, the second resumed after the journal made
its key.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from singularity.secrets import SECRET_MARKER, Scrubber
from singularity.testing.scripted_server import Call, RecordedRequest, ScriptedServer, Turn
from singularity.testing.scripted_server import _Handler as ScriptedHandler
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.loop_http import cli_args

API_KEY = "sk-canary-3f9d27a1c4e8b6d0"
HMAC_SECRET = 'hmac"canary\\51e7c2d98a04'  # a quote and a backslash: JSON escapes differ
MOST_TOKEN = "most-canary-8c1f4b7e2d93"
ADD_RULE = "singularity_self_add_rule"
WRITE_FILE = "singularity_file_write"
JOURNAL_WRITE = "singularity_journal_write"


def forms(secret: str) -> list[bytes]:
    """The secret as it would stand in a file: plain, JSON-escaped, base64."""
    plain = secret.encode()
    return [plain, json.dumps(secret)[1:-1].encode(), base64.b64encode(plain)]


class EchoingGateway(ScriptedServer):
    """A scripted gateway whose first completion answers 500 with the request's headers."""

    echoes = 1

    def _route(self, handler: ScriptedHandler, request: RecordedRequest) -> None:
        if request.path.endswith("v1/chat/completions") and self.echoes > 0:
            self.echoes -= 1
            body = {"error": {"message": f"bad request; you sent {dict(request.headers)}"}}
            handler.reply(500, json.dumps(body).encode())
            return
        super()._route(handler, request)


class EchoingMost:
    """A Most service that echoes its request headers in every answer (422 when told to)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _reply(self, status: int, document: Any) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._reply(200, {"status": "ok", "echo": dict(self.headers)})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.bodies.append(body)
                if b"refuse" in body:
                    self._reply(422, {"error": f"not for you: {dict(self.headers)}"})
                    return
                echo = {"headers": dict(self.headers), "note": f"token {MOST_TOKEN}"}
                message = {"id": str(uuid.uuid4())}
                self._reply(200, {"id": str(uuid.uuid4()), "message": message, "echo": echo})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def most() -> Iterator[EchoingMost]:
    server = EchoingMost()
    yield server
    server.stop()


def _secret_file(path: Path, value: str) -> Path:
    path.write_text(value + "\n", "utf-8")
    path.chmod(0o600)
    return path


def _every_form(texts: list[str]) -> str:
    """Each text plain, JSON-escaped and base64, in one string a model might answer."""
    parts = []
    for text in texts:
        parts += [text, json.dumps(text)[1:-1], base64.b64encode(text.encode()).decode()]
    return " | ".join(parts)


def _first_life(known: list[str]) -> list[Turn]:
    calls = [
        Call("most_create_chat", json.dumps({"from": "me", "to": ["you"], "text": "hello"}), "m1"),
        Call("most_create_chat", json.dumps({"from": "me", "to": ["you"], "text": "refuse"}), "m2"),
        Call(JOURNAL_WRITE, json.dumps({"text": "a quiet thought"}), "j1"),
        Call(ADD_RULE, json.dumps({"rule": f"remember {known[0]}"}), "r1"),
        Call(WRITE_FILE, json.dumps({"path": "notes.txt", "content": _every_form(known)}), "f1"),
    ]
    return [Turn.tool_calls(*calls), Turn.text(f"I know {_every_form(known)}")]


def _second_life(known: list[str]) -> list[Turn]:
    rule = Call(ADD_RULE, json.dumps({"rule": f"keys {_every_form(known)}"}), "r2")
    return [Turn.tool_calls(rule), Turn.text(f"and {_every_form(known)}")]


def _run(args: list[str], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(SINGULARITY), *args], cwd=root, env=env, capture_output=True)


@pytest.mark.parametrize("mode", ["bearer", "hmac"])
def test_no_form_of_any_secret_is_written_anywhere(
    mode: str, tmp_path: Path, most: EchoingMost
) -> None:
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    env = clean_environment()
    env["MOST_SERVICE_TOKEN_FILE"] = str(_secret_file(secrets_dir / "most.token", MOST_TOKEN))
    env["MOST_BASE_URL"] = most.url
    if mode == "bearer":
        env["BRAMA_API_KEY_FILE"] = str(_secret_file(secrets_dir / "api.key", API_KEY))
        server_options: dict[str, Any] = {"bearer_token": API_KEY}
    else:
        env["BRAMA_HMAC_SECRET_FILE"] = str(_secret_file(secrets_dir / "hmac", HMAC_SECRET))
        env["BRAMA_API_KEY"] = API_KEY  # configured, unused: withheld all the same
        server_options = {"hmac_secret": HMAC_SECRET}
    known = [API_KEY, MOST_TOKEN] + ([HMAC_SECRET] if mode == "hmac" else [])
    with EchoingGateway(_first_life(known), **server_options) as gateway:
        args = cli_args(tmp_path, gateway, "--max-cycles", "2")
        first = _run(["run", *args], tmp_path, env)
        assert first.returncode == 0, first.stderr.decode()
        key_file = tmp_path / "being" / "journal.key"
        keys = [item["key"] for item in json.loads(key_file.read_text())["keys"]]
        known += keys + [base64.b64decode(key).hex() for key in keys]
        gateway.add(*_second_life(known))
        second = _run(
            ["once", "--resume", "--log-format", "json", *cli_args(tmp_path, gateway)],
            tmp_path,
            env,
        )
        assert second.returncode == 0, second.stderr.decode()
        requests = gateway.requests
    outputs = {
        "stdout": first.stdout + second.stdout,
        "stderr": first.stderr + second.stderr,
        "prompts": b"\n".join(request.body for request in requests),
        "sent to Most": b"\n".join(most.bodies),
    }
    skipped = {secrets_dir, key_file}
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file() and not path.is_symlink() and not skipped & {path, *path.parents}:
            outputs[str(path.relative_to(tmp_path))] = path.read_bytes()
    leaks = [
        (where, secret)
        for where, data in outputs.items()
        for secret in known
        for form in forms(secret)
        if form in data
    ]
    assert leaks == []
    # The test reached what it claims: each secret was echoed and withheld where it landed.
    marker = SECRET_MARKER.encode()
    assert marker in outputs["stderr"], "the echoed headers never reached the log"
    assert marker in outputs["being/state.json"]
    if mode == "bearer":  # the echoed Authorization header, journaled as a warning
        assert marker in outputs["being/activity.jsonl"]
    assert marker in outputs["ws/notes.txt"]
    assert b"most_create_chat" in outputs["being/state.json"]
    assert len(most.bodies) == 2


def test_the_scrubber_finds_a_secret_inside_longer_base64() -> None:
    scrubber = Scrubber([API_KEY])
    for before in range(4):
        for after in range(4):
            data = bytes(range(before)) + API_KEY.encode() + bytes(range(after))
            encoded = base64.b64encode(data).decode()
            assert scrubber.found_in(encoded), (before, after)
            assert not scrubber.found_in(scrubber.text(encoded))
    assert scrubber.json({"k": [f"x{API_KEY}y", 3]}) == {"k": [f"x{SECRET_MARKER}y", 3]}
