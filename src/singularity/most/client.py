"""The Most messaging client (spec §12.2): health, create chat, send message."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from singularity.errors import MostError, RetryClass
from singularity.gateway.client import resolve_endpoint
from singularity.jsoncodec import loads_strict
from singularity.secrets import Secret
from singularity.text import safe_json, safe_text

MAX_BODY_TEXT = 800
_STATUS_MEANING = {
    401: "authentication",
    403: "authentication",
    422: "invalid arguments",
    501: "unsupported capability",
    503: "worker unavailable",
}


def status_error(status: int, body: bytes) -> MostError:
    """The error for a non-2xx answer, with its class (spec §12.2)."""
    meaning = _STATUS_MEANING.get(status, "HTTP error")
    if status == 503:
        retry = RetryClass.INDETERMINATE
    elif 500 <= status <= 599 and status != 501:
        retry = RetryClass.TRANSIENT
    else:
        retry = RetryClass.PERMANENT
    text = body.decode("utf-8", "replace")[:MAX_BODY_TEXT]
    return MostError(f"{meaning} ({status}): {text}", retry)


def _pointer(document: Any, pointer: str) -> str:
    value = document
    for part in pointer.strip("/").split("/"):
        if not isinstance(value, dict) or part not in value:
            raise MostError(f"response missing {pointer}")
        value = value[part]
    if not isinstance(value, str):
        raise MostError(f"response missing {pointer}")
    try:
        uuid.UUID(value)
    except ValueError as error:
        raise MostError(f"invalid UUID at {pointer}: {error}") from None
    return value


def message_body(text: str, preferred_service: str | None) -> dict[str, Any]:
    """The `message` object of a create or send request."""
    message: dict[str, Any] = {"parts": [{"type": "text", "value": text}]}
    if preferred_service is not None:
        message["preferred_service"] = preferred_service
    return message


class MostClient:
    """Async client of one Most service."""

    def __init__(
        self,
        base_url: str,
        token: Secret,
        *,
        timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.health_url = resolve_endpoint(base_url, "healthz")
        self.chats_url = resolve_endpoint(base_url, "v3/chats")
        self._base_url = base_url
        self._token = token
        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            trust_env=False,
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _request(self, method: str, url: str, body: dict[str, Any] | None) -> Any:
        headers = {}
        if body is not None:
            headers["authorization"] = f"Bearer {self._token.value}"
        try:
            response = await self._http.request(method, url, json=body, headers=headers)
        except httpx.HTTPError as error:
            retry = RetryClass.TRANSIENT if method == "GET" else RetryClass.INDETERMINATE
            raise MostError(safe_text(str(error)) or type(error).__name__, retry) from None
        if not 200 <= response.status_code <= 299:
            raise status_error(response.status_code, response.content)
        try:
            return safe_json(loads_strict(response.content))
        except ValueError as error:
            raise MostError(f"invalid response JSON: {error}") from None

    async def health(self) -> dict[str, Any]:
        """`GET healthz`: `{status, backends, composition}`."""
        document = await self._request("GET", self.health_url, None)
        if not isinstance(document, dict) or not isinstance(document.get("status"), str):
            raise MostError("invalid response JSON: health must be an object with a status")
        document.setdefault("backends", "")
        document.setdefault("composition", "")
        return document

    async def create_chat(
        self, sender: str, recipients: list[str], text: str, preferred_service: str | None
    ) -> tuple[dict[str, Any], str, str]:
        """Create a chat with a first message; returns the response, chat id and message id."""
        if not sender.strip() or not recipients or not text.strip():
            raise MostError("from, recipients, and text are required")
        body = {"from": sender, "to": recipients, "message": message_body(text, preferred_service)}
        document = await self._request("POST", self.chats_url, body)
        return document, _pointer(document, "/id"), _pointer(document, "/message/id")

    async def send_message(
        self, chat_id: str, text: str, preferred_service: str | None
    ) -> tuple[dict[str, Any], str]:
        """Send a message to a chat; returns the response and the message id."""
        if not text.strip():
            raise MostError("text is required")
        url = resolve_endpoint(self._base_url, f"v3/chats/{chat_id}/messages")
        document = await self._request(
            "POST", url, {"message": message_body(text, preferred_service)}
        )
        return document, _pointer(document, "/id")
