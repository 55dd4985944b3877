"""Most (spec §12): the client's error classes and the three tools, against a real local server."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from singularity.errors import MostError, RetryClass
from singularity.most.client import MostClient
from singularity.most.tools import CREATE_CHAT, HEALTH, SEND_MESSAGE, most_tools
from singularity.secrets import Secret
from singularity.tools.base import Status
from tests.support.ports import closed_port_url

CHAT_ID = "6f1c2a52-9d8e-4c1b-a3f0-0a1b2c3d4e5f"
MESSAGE_ID = "0b7e8e0a-1111-4222-8333-944455566677"


class MostServer:
    """A local HTTP server speaking the §12.2 contract, with a settable next answer."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answer: tuple[int, bytes] | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                server.requests.append(
                    {"method": "GET", "path": self.path, "headers": dict(self.headers)}
                )
                if server.answer:
                    self._reply(*server.answer)
                    return
                self._reply(200, b'{"status":"ok","backends":"imessage,sms"}')

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                server.requests.append(
                    {
                        "method": "POST",
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": body,
                    }
                )
                if server.answer:
                    self._reply(*server.answer)
                elif self.path == "/v3/chats":
                    self._reply(
                        200, json.dumps({"id": CHAT_ID, "message": {"id": MESSAGE_ID}}).encode()
                    )
                else:
                    self._reply(200, json.dumps({"id": MESSAGE_ID, "status": "queued"}).encode())

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def most() -> Iterator[MostServer]:
    server = MostServer()
    yield server
    server.stop()


def _call(server: MostServer, name: str, arguments: dict[str, Any]) -> Any:
    async def go() -> Any:
        client = MostClient(server.url, Secret("most-token"))
        try:
            return await most_tools(client).call(name, arguments)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_the_tool_definitions_are_exact() -> None:
    assert json.dumps(
        [d.wire() for d in (HEALTH, CREATE_CHAT, SEND_MESSAGE)], separators=(",", ":")
    ) == (
        '[{"type":"function","function":{"name":"most_health","description":"Check Most messaging '
        'readiness and active backends","parameters":{"type":"object","properties":{},"required":[],'
        '"additionalProperties":false}}},{"type":"function","function":{"name":"most_create_chat",'
        '"description":"Create a Most chat and send its first text message","parameters":{"type":'
        '"object","properties":{"from":{"type":"string"},"to":{"type":"array","items":{"type":'
        '"string"}},"text":{"type":"string"},"preferred_service":{"type":"string","enum":["iMessage",'
        '"SMS","RCS"]}},"required":["from","to","text"],"additionalProperties":false}}},{"type":'
        '"function","function":{"name":"most_send_message","description":"Send a text message to an '
        'existing Most chat","parameters":{"type":"object","properties":{"chat_id":{"type":"string",'
        '"format":"uuid"},"text":{"type":"string"},"preferred_service":{"type":"string","enum":'
        '["iMessage","SMS","RCS"]}},"required":["chat_id","text"],"additionalProperties":false}}}]'
    )


def test_health_is_unauthenticated_and_defaults_missing_fields(most: MostServer) -> None:
    outcome = _call(most, "most_health", {})
    assert outcome.status is Status.SUCCESS
    assert outcome.content == {"status": "ok", "backends": "imessage,sms", "composition": ""}
    assert most.requests[0]["path"] == "/healthz"
    assert "authorization" not in {key.lower() for key in most.requests[0]["headers"]}


def test_create_chat_sends_the_contract_body_and_records_both_ids(most: MostServer) -> None:
    outcome = _call(
        most,
        "most_create_chat",
        {
            "from": "+15550001",
            "to": ["+15550002"],
            "text": "hello",
            "preferred_service": "SMS",
            "x": 1,
        },
    )
    assert outcome.status is Status.SUCCESS
    assert (outcome.chat_id, outcome.message_id) == (CHAT_ID, MESSAGE_ID)
    assert outcome.content == {"id": CHAT_ID, "message": {"id": MESSAGE_ID}}
    request = most.requests[0]
    assert request["path"] == "/v3/chats"
    assert request["headers"]["authorization"] == "Bearer most-token"
    assert request["body"] == {
        "from": "+15550001",
        "to": ["+15550002"],
        "message": {"parts": [{"type": "text", "value": "hello"}], "preferred_service": "SMS"},
    }


def test_send_message_uses_the_chat_path_and_keeps_the_given_chat_id(most: MostServer) -> None:
    outcome = _call(most, "most_send_message", {"chat_id": CHAT_ID, "text": "again"})
    assert outcome.status is Status.SUCCESS
    assert (outcome.chat_id, outcome.message_id) == (CHAT_ID, MESSAGE_ID)
    assert most.requests[0]["path"] == f"/v3/chats/{CHAT_ID}/messages"
    assert most.requests[0]["body"] == {"message": {"parts": [{"type": "text", "value": "again"}]}}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"to": ["a"], "text": "t"}, "missing field `from`"),
        ({"from": 1, "to": ["a"], "text": "t"}, "invalid type for `from`: expected a string"),
        (
            {"from": "a", "to": "b", "text": "t"},
            "invalid type for `to`: expected an array of strings",
        ),
    ],
)
def test_create_chat_decoding_failures_are_invalid_arguments(
    most: MostServer, arguments: dict[str, Any], message: str
) -> None:
    outcome = _call(most, "most_create_chat", arguments)
    assert (outcome.status, outcome.error_code, outcome.content) == (
        Status.FAILED,
        "invalid_arguments",
        {"message": message},
    )
    assert most.requests == []


def test_blank_fields_are_indeterminate_remote_as_the_spec_quirk_says(most: MostServer) -> None:
    outcome = _call(most, "most_create_chat", {"from": " ", "to": ["a"], "text": "t"})
    assert (outcome.status, outcome.error_code) == (Status.INDETERMINATE, "remote")
    assert outcome.content == {"message": "most: from, recipients, and text are required"}
    outcome = _call(most, "most_send_message", {"chat_id": CHAT_ID, "text": "  "})
    assert outcome.content == {"message": "most: text is required"}
    assert most.requests == []


def test_a_chat_id_that_is_not_a_uuid_is_invalid_arguments(most: MostServer) -> None:
    outcome = _call(most, "most_send_message", {"chat_id": "nope", "text": "t"})
    assert (outcome.status, outcome.error_code) == (Status.FAILED, "invalid_arguments")


@pytest.mark.parametrize(
    ("status", "meaning", "retry"),
    [
        (401, "authentication", RetryClass.PERMANENT),
        (403, "authentication", RetryClass.PERMANENT),
        (422, "invalid arguments", RetryClass.PERMANENT),
        (501, "unsupported capability", RetryClass.PERMANENT),
        (503, "worker unavailable", RetryClass.INDETERMINATE),
        (500, "HTTP error", RetryClass.TRANSIENT),
        (502, "HTTP error", RetryClass.TRANSIENT),
        (404, "HTTP error", RetryClass.PERMANENT),
        (409, "HTTP error", RetryClass.PERMANENT),
    ],
)
def test_each_status_class_maps_to_its_meaning_and_retry(
    most: MostServer, status: int, meaning: str, retry: RetryClass
) -> None:
    most.answer = (status, b"x" * 1000)

    async def go() -> None:
        client = MostClient(most.url, Secret("t"))
        try:
            with pytest.raises(MostError) as caught:
                await client.create_chat("a", ["b"], "c", None)
        finally:
            await client.aclose()
        assert str(caught.value) == f"most: {meaning} ({status}): " + "x" * 800
        assert caught.value.retry is retry

    asyncio.run(go())
    outcome = _call(most, "most_send_message", {"chat_id": CHAT_ID, "text": "t"})
    assert (outcome.status, outcome.error_code) == (Status.INDETERMINATE, "remote")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "most: invalid response JSON: "),
        (b"{}", "most: response missing /id"),
        (
            json.dumps({"id": "zzz", "message": {"id": MESSAGE_ID}}).encode(),
            "most: invalid UUID at /id: ",
        ),
        (json.dumps({"id": CHAT_ID}).encode(), "most: response missing /message/id"),
    ],
)
def test_malformed_success_bodies_are_permanent(
    most: MostServer, body: bytes, message: str
) -> None:
    most.answer = (200, body)
    outcome = _call(most, "most_create_chat", {"from": "a", "to": ["b"], "text": "c"})
    assert outcome.status is Status.INDETERMINATE
    assert outcome.content["message"].startswith(message)


def test_transport_failures_are_transient_for_get_and_indeterminate_for_post() -> None:
    async def go() -> None:
        client = MostClient(closed_port_url(), Secret("t"), timeout=2)
        try:
            with pytest.raises(MostError) as get_error:
                await client.health()
            with pytest.raises(MostError) as post_error:
                await client.send_message(str(uuid.uuid4()), "t", None)
        finally:
            await client.aclose()
        assert get_error.value.retry is RetryClass.TRANSIENT
        assert post_error.value.retry is RetryClass.INDETERMINATE

    asyncio.run(go())
