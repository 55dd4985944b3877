"""The Brama client: health, model list and signed chat completions (spec §9).

Endpoints are relative references resolved against the base URL by RFC 3986 (so
`http://h/api` + `v1/models` is `http://h/v1/models`). The timeout is a total
per-request deadline, not httpx's per-phase one. Retry classes (§9.5, §18):

- non-2xx on a completion: transient for 429 and 5xx, else permanent;
- a completion that failed to connect (`ConnectError`, `ConnectTimeout`,
  `PoolTimeout`) is transient: no byte of it left this process, so it cannot have
  been processed; every other transport failure of a completion (write, read,
  dropped connection, deadline) is indeterminate;
- any failure of `health` or `models` is transient, except a health answer that is
  not `{"status": "ok"}`, which is permanent.

Real servers (decision 22): a base URL ending in `/v1` or `/v1/` names the same server as
the URL without it (OpenAI's convention), and a server with no `health` (404 or 405) or
one answering it with an empty 200 is healthy when `GET v1/models` answers.

Transport failures read `transport error: <httpx text, or its class name>`. Nothing
is retried here; the loop decides. Nothing is read from the environment either:
proxies and CA settings are httpx defaults unless the caller passes `trust_env=True`.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpx

from singularity.errors import BramaError, RetryClass
from singularity.gateway.auth import Auth, is_header_safe
from singularity.gateway.encoding import WireCache
from singularity.gateway.wire import Completion, completion_body, parse_completion
from singularity.jsoncodec import compact_utf8, loads_strict
from singularity.secrets import Scrubber
from singularity.settings_check import is_loopback_url as is_loopback_url
from singularity.text import safe_text
from singularity.tools.base import ToolDefinition

HEALTH_PATH: Final = "health"
MODELS_PATH: Final = "v1/models"
COMPLETIONS_PATH: Final = "v1/chat/completions"
ERROR_BODY_CHARS: Final = 800
DEFAULT_MAX_RESPONSE_BYTES: Final = 16 * 1024 * 1024
MISSING_STATUSES: Final = (404, 405)
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def resolve_endpoint(base_url: str, reference: str) -> str:
    """Resolve `reference` against `base_url` (RFC 3986); permanent error if unusable.

    A base whose path ends in the segment `v1` (`…/v1` or `…/v1/`) stands for its parent:
    `https://api.openai.com/v1` and `https://api.openai.com/` are the same server.
    """
    try:
        base = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError, ValueError) as error:
        raise _permanent(f"invalid endpoint: {error}") from None
    if base.scheme not in ("http", "https") or not base.host:
        raise _permanent(f"invalid endpoint: not an absolute http or https URL: {base_url}")
    path = base.path.rstrip("/")
    if path == "/v1" or path.endswith("/v1"):
        base = base.copy_with(path=path[: -len("v1")])
    return str(base.join(reference))


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~0.2 s; every client of the process can share one context.
    return httpx.create_ssl_context(trust_env=False)


def _permanent(message: str) -> BramaError:
    return BramaError(message, retry=RetryClass.PERMANENT)


def _transport_text(error: BaseException) -> str:
    text = safe_text(str(error).strip())
    return f"transport error: {text or type(error).__name__}"


def http_error_message(status: int, body: bytes) -> str:
    """`HTTP <code>: <error.message>` or the first 800 characters of the body (spec §9.5)."""
    try:
        document = loads_strict(body)
    except (ValueError, RecursionError):
        document = None
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return f"HTTP {status}: {safe_text(error['message'])}"
    text = body.decode("utf-8", errors="replace")[:ERROR_BODY_CHARS]
    return f"HTTP {status}: {text}"


def http_error_class(status: int) -> RetryClass:
    """Transient for 429 and 5xx, else permanent."""
    return RetryClass.TRANSIENT if status == 429 or 500 <= status <= 599 else RetryClass.PERMANENT


@dataclass(frozen=True)
class _Reply:
    status: int
    body: bytes


class BramaClient:
    """Async client of one OpenAI-compatible gateway; create once, close with `aclose()`."""

    def __init__(
        self,
        base_url: str,
        *,
        agent_id: str,
        auth: Auth,
        timeout: float = 120.0,
        max_tokens: int = 2048,
        temperature: float = 0.2,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        trust_env: bool = False,
        scrubber: Scrubber | None = None,
        tool_choice: str | None = None,
    ) -> None:
        if auth.hmac_secret is not None and not is_header_safe(agent_id):
            raise _permanent("cannot initialize signer: agent id must be printable ASCII")
        self.health_url = resolve_endpoint(base_url, HEALTH_PATH)
        self.models_url = resolve_endpoint(base_url, MODELS_PATH)
        self.completions_url = resolve_endpoint(base_url, COMPLETIONS_PATH)
        self.agent_id = agent_id
        self.auth = auth
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.tool_choice = tool_choice
        self._clock = clock
        self._max_response_bytes = max_response_bytes
        self._scrubber = scrubber or Scrubber()
        """The runtime's secrets, withheld from every body sent and every text received."""
        self._wire = WireCache()
        """The tools array, encoded once for as long as the catalogue stays the same."""
        self.last_request_body: bytes | None = None
        """The exact bytes of the last completion body sent (for tests and diagnostics)."""
        # trust_env=False: no proxy or certificate settings are read from the environment
        # behind the configuration's back; the caller opts in explicitly.
        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            trust_env=trust_env,
            verify=True if trust_env else _tls_context(),
        )

    async def __aenter__(self) -> BramaClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _exchange(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None = None,
        timeout: float | None = None,
    ) -> _Reply:
        request = self._http.build_request(method, url, headers=dict(headers), content=content)
        async with asyncio.timeout(self.timeout if timeout is None else timeout):
            response = await self._http.send(request, stream=True)
            try:
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body.extend(chunk)
                    if len(body) > self._max_response_bytes:
                        raise _TooLarge(self._max_response_bytes)
            finally:
                await response.aclose()
        return _Reply(response.status_code, bytes(body))

    async def _get(self, url: str) -> _Reply:
        try:
            return await self._exchange("GET", url, self.auth.read_headers())
        except (httpx.HTTPError, TimeoutError, _TooLarge) as error:
            text = self._scrubber.text(_failure_text(error, self.timeout))
            raise BramaError(text, RetryClass.TRANSIENT) from None

    async def health(self) -> None:
        """`GET health`; returns if the gateway reports `{"status": "ok"}`.

        Without a `health` route (404, 405), or with an empty 200, the model list decides.
        """
        reply = await self._get(self.health_url)
        if reply.status in MISSING_STATUSES or (
            200 <= reply.status <= 299 and not reply.body.strip()
        ):
            await self.models()
            return
        if not 200 <= reply.status <= 299:
            raise BramaError(
                self._scrubber.text(http_error_message(reply.status, reply.body)),
                RetryClass.TRANSIENT,
            )
        try:
            document = loads_strict(reply.body)
        except (ValueError, RecursionError):
            document = None
        if not isinstance(document, dict) or document.get("status") != "ok":
            raise _permanent("health response is not ok")

    async def models(self) -> list[str]:
        """`GET v1/models`: the advertised model ids, in the gateway's order."""
        reply = await self._get(self.models_url)
        if not 200 <= reply.status <= 299:
            raise BramaError(
                self._scrubber.text(http_error_message(reply.status, reply.body)),
                RetryClass.TRANSIENT,
            )
        return _model_ids(reply.body)

    async def complete(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[ToolDefinition],
        *,
        timeout: float | None = None,
    ) -> Completion:
        """`POST v1/chat/completions`, signed; the validated completion or a `BramaError`.

        `messages` given as `EncodedMessages` are sent as the bytes they carry.

        `timeout` shortens the deadline of this one call (never lengthens it).
        """
        deadline = self.timeout if timeout is None else min(timeout, self.timeout)
        body = completion_body(
            model,
            messages,
            self.max_tokens,
            self.temperature,
            tools,
            self.tool_choice,
            cache=self._wire,
        )
        scrub = self._scrubber
        if scrub.found_in(body):  # decision 32: no secret of the runtime is ever sent
            body = compact_utf8(scrub.json(loads_strict(body)))
        headers = self.auth.post_headers(self.agent_id, body, int(self._clock()))
        self.last_request_body = body
        try:
            reply = await self._exchange("POST", self.completions_url, headers, body, deadline)
        except _NOT_SENT as error:
            raise BramaError(scrub.text(_transport_text(error)), RetryClass.TRANSIENT) from None
        except (httpx.HTTPError, TimeoutError, _TooLarge) as error:
            text = scrub.text(_failure_text(error, deadline))
            raise BramaError(text, RetryClass.INDETERMINATE) from None
        if not 200 <= reply.status <= 299:
            message = scrub.text(http_error_message(reply.status, reply.body))
            raise BramaError(message, http_error_class(reply.status))
        return parse_completion(reply.body, scrub)


class _TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"response body exceeds {limit} bytes")


def _failure_text(error: BaseException, timeout: float) -> str:
    if isinstance(error, TimeoutError):
        return f"transport error: no complete response within {timeout:g} seconds"
    if isinstance(error, _TooLarge):
        return str(error)
    return _transport_text(error)


def _model_ids(body: bytes) -> list[str]:
    try:
        document = loads_strict(body)
    except (ValueError, RecursionError):
        document = None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        raise BramaError("invalid models response: data must be an array", RetryClass.TRANSIENT)
    ids: list[str] = []
    for entry in data:
        model_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(model_id, str):
            raise BramaError(
                "invalid models response: every entry needs a string id", RetryClass.TRANSIENT
            )
        ids.append(safe_text(model_id))
    return ids
