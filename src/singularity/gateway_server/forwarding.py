"""Forwarding a completion request to the upstream of its route, whole or streamed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from singularity.gateway_server.routes import Route, Upstream
from singularity.jsoncodec import compact


@dataclass(frozen=True)
class Forwarded:
    """An upstream's answer (or the gateway's own error for a failed exchange)."""

    status: int
    body: bytes


def error_body(message: str, kind: str, code: str | None = None) -> bytes:
    """An OpenAI-style error document."""
    return compact(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}
    ).encode()


def _outgoing(route: Route, request: Mapping[str, Any]) -> tuple[Upstream, bytes, dict[str, str]]:
    upstream = route.upstream
    if upstream is None:
        raise ValueError("forwarding needs an upstream route")
    body = compact({**request, "model": route.model}).encode()
    headers = {"content-type": "application/json"}
    if upstream.key is not None:
        headers["authorization"] = f"Bearer {upstream.key.reveal()}"
    return upstream, body, headers


def _failure(upstream: Upstream, error: httpx.HTTPError) -> Forwarded:
    if isinstance(error, httpx.TimeoutException):
        message = f"upstream {upstream.name} did not answer within {upstream.timeout_secs:g} s"
        return Forwarded(504, error_body(message, "upstream_error", "upstream_timeout"))
    message = f"upstream {upstream.name} failed: {error or type(error).__name__}"
    return Forwarded(502, error_body(message, "upstream_error", "upstream_unreachable"))


async def forward(http: httpx.AsyncClient, route: Route, request: Mapping[str, Any]) -> Forwarded:
    """Send the completion request to the route's upstream under its own model id."""
    upstream, body, headers = _outgoing(route, request)
    try:
        response = await http.post(
            upstream.completions_url, content=body, headers=headers, timeout=upstream.timeout_secs
        )
    except httpx.HTTPError as error:
        return _failure(upstream, error)
    if 200 <= response.status_code <= 299:
        try:
            json.loads(response.content)
        except ValueError:
            message = f"upstream {upstream.name} answered {response.status_code} without JSON"
            return Forwarded(502, error_body(message, "upstream_error", "upstream_invalid"))
    return Forwarded(response.status_code, response.content)


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def forward_stream(
    http: httpx.AsyncClient, route: Route, request: Mapping[str, Any]
) -> tuple[int, AsyncIterator[bytes]]:
    """Send a `stream: true` request upstream: (status, the body as it arrives)."""
    upstream, body, headers = _outgoing(route, request)
    outgoing = http.build_request(
        "POST", upstream.completions_url, content=body, headers=headers,
        timeout=upstream.timeout_secs,
    )  # fmt: skip
    try:
        response = await http.send(outgoing, stream=True)
    except httpx.HTTPError as error:
        failed = _failure(upstream, error)
        return failed.status, _once(failed.body)
    if response.status_code != 200:
        content = await response.aread()
        await response.aclose()
        return response.status_code, _once(content)

    async def relayed() -> AsyncIterator[bytes]:
        try:
            async for piece in response.aiter_raw():
                yield piece
        except httpx.HTTPError as error:
            message = f"upstream {upstream.name} failed mid-stream: {error or type(error).__name__}"
            failure = {"error": {"message": message, "type": "upstream_error", "param": None}}
            yield f"data: {compact(failure)}\n\n".encode()
        finally:
            await response.aclose()

    return 200, relayed()
