"""One connection to one skill server: start, handshake, list, call, restart, close.

A connection is owned by one task (anyio's task groups must be left by the task that
entered them); calls are made from other tasks on the same loop. Each request has a
deadline; a reply that arrives after its deadline is dropped by the SDK's dispatcher,
whose pending table no longer knows the id, so it cannot answer the next call. A server
that dies is reported for the call in flight, and restarted for a later call with a
bounded, growing back-off.

A server given by a bare `url` is first spoken to over streamable HTTP; when it refuses
that handshake (an SSE server answers the POST with 404 or 405), the connection falls
back to SSE, the protocol's earlier HTTP transport, and keeps to it for restarts. A
server that speaks neither fails with both reasons.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx2
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolRequest,
    CallToolRequestParams,
    Implementation,
)
from pydantic import BaseModel, ConfigDict, ValidationError

from singularity.errors import McpError, RetryClass
from singularity.skills.config import HttpTransport
from singularity.skills.endpoints import Endpoint, HttpLaunch, StdioLaunch
from singularity.skills.transport import http_transport, sse_transport, stdio_transport
from singularity.text import safe_json, safe_text
from singularity.version import __version__

log = logging.getLogger(__name__)
MAX_LIST_PAGES = 100
BACKOFF_FIRST_SECS = 1.0
BACKOFF_MAX_SECS = 60.0
OWNER_SLACK_SECS = 10.0
INDETERMINATE = RetryClass.INDETERMINATE


class RawResult(BaseModel):
    """A result kept exactly as sent: every member is an extra, nothing is dropped."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class RemoteTool:
    """A tool as the server listed it."""

    name: str
    description: str
    input_schema: Any


@dataclass
class CallReport:
    """What one call produced: the raw result or an error, and what to journal."""

    result: dict[str, Any] | None = None
    error: McpError | None = None
    notices: list[str] = field(default_factory=list)


def backoff(failures: int) -> float:
    """Seconds before the next restart after `failures` consecutive ones (0 after the first)."""
    if failures <= 1:
        return 0.0
    return min(BACKOFF_MAX_SECS, BACKOFF_FIRST_SECS * 2.0 ** (failures - 2))


@dataclass
class Restarts:
    """When a stopped server may be started again (a growing back-off), and what is said."""

    label: str
    failures: int = 0
    retry_at: float = 0.0
    down_noted: bool = False

    def succeeded(self) -> None:
        """A call went through: the back-off starts over."""
        self.failures = 0

    def lost(self, report: CallReport) -> None:
        """The server stopped during a call."""
        self._failed()
        self.down_noted = True
        report.notices.append(
            f"{self.label} stopped during tools/call; it will be restarted for later calls"
        )

    async def attempt(self, report: CallReport, start: Callable[[], Awaitable[None]]) -> bool:
        """Start the stopped server with `start` if the back-off allows; False if it is down."""
        if not self.down_noted:
            self.down_noted = True
            self._failed()
            report.notices.append(f"{self.label} had stopped; restarting it")
        wait = self.retry_at - anyio.current_time()
        if wait > 0:
            report.error = McpError(
                f"{self.label} is down; the call was not sent (restart in {wait:.0f}s)",
                INDETERMINATE,
            )
            return False
        try:
            await start()
        except McpError as error:
            delay = self._failed()
            report.notices.append(
                f"{self.label} failed to restart: {error.message}; next attempt in {delay:.0f}s"
            )
            report.error = McpError(
                f"{self.label} is down; the call was not sent ({error.message})", INDETERMINATE
            )
            return False
        self.down_noted = False
        report.notices.append(f"{self.label} was restarted")
        return True

    def _failed(self) -> float:
        self.failures += 1
        delay = backoff(self.failures)
        self.retry_at = anyio.current_time() + delay
        return delay


def _describe(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, McpError):
        return error.message
    if isinstance(error, httpx2.HTTPStatusError):
        response = error.response
        return f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
    return str(error) or type(error).__name__


def _handshake_refusal(method: str, error: BaseException) -> str | None:
    """The server's reason when it answered `initialize` with an error (not a timeout)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if method != "initialize" or not isinstance(error, MCPError):
        return None
    if error.code in (REQUEST_TIMEOUT, CONNECTION_CLOSED):
        return None
    return error.error.message or f"JSON-RPC {error.code}"


def _shown_url(launch: StdioLaunch | HttpLaunch) -> str:
    """The endpoint URL without its query or fragment, which may carry a credential."""
    if not isinstance(launch, HttpLaunch):
        return ""
    parts = urlsplit(launch.url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


class Connection:
    """A supervised connection to one skill server."""

    def __init__(self, endpoint: Endpoint, *, timeout: float, grace: float) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.grace = grace
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._restarts = Restarts(endpoint.label)
        self._restart_lock = asyncio.Lock()
        launch = endpoint.launch
        self._http: HttpTransport | None = (
            launch.transport if isinstance(launch, HttpLaunch) else None
        )
        self._refused: str | None = None
        """Why the server refused the streamable-HTTP handshake, when it did."""

    @property
    def label(self) -> str:
        """How messages name this server."""
        return self.endpoint.label

    @property
    def alive(self) -> bool:
        """Whether the server is connected and has not been seen to stop."""
        return self._client is not None and not self._stop.is_set()

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        launch = self.endpoint.launch
        if isinstance(launch, HttpLaunch):
            return sse_transport(launch) if self._http == "sse" else http_transport(launch)
        return stdio_transport(launch, self.label, self.grace, self._stop.set)

    async def open(self) -> list[RemoteTool]:
        """Start the server, hand-shake and list its tools, all under the deadline."""
        return await self._connect(list_tools=True)

    async def _connect(self, *, list_tools: bool) -> list[RemoteTool]:
        """Connect over the known transport; a bare URL refused as streamable HTTP tries SSE."""
        self._refused = None
        try:
            tools = await self._connect_once(list_tools=list_tools)
        except McpError:
            refused = self._refused
            if self._http != "auto" or refused is None:
                raise
        else:
            if self._http == "auto":
                self._http = "streamable-http"
            return tools
        self._http = "sse"
        try:
            tools = await self._connect_once(list_tools=list_tools)
        except McpError as error:
            self._http = "auto"
            url = _shown_url(self.endpoint.launch)
            raise McpError(
                f"{self.label} at {url} answered neither streamable HTTP ({refused}) "
                f"nor SSE ({error.message})",
                RetryClass.PERMANENT,
            ) from None
        log.info("%s refused streamable HTTP (%s); speaking SSE to it", self.label, refused)
        return tools

    async def _connect_once(self, *, list_tools: bool) -> list[RemoteTool]:
        self._stop = asyncio.Event()
        ready: asyncio.Future[list[RemoteTool]] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(ready, self._stop, list_tools))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), self.timeout + OWNER_SLACK_SECS)
        except TimeoutError:
            await self.close()
            message = f"{self.label} request deadline exceeded: initialize"
            raise McpError(message, INDETERMINATE) from None
        except BaseException:
            await self.close()
            raise

    async def _own(
        self, ready: asyncio.Future[list[RemoteTool]], stop: asyncio.Event, list_tools: bool
    ) -> None:
        method = "initialize"
        try:
            client = Client(
                self._transport(),
                mode="legacy",
                client_info=Implementation(name="singularity", version=__version__),
                read_timeout_seconds=self.timeout,
                cache=None,
            )
            async with client:
                method = "tools/list"
                tools = await self._list(client) if list_tools else []
                self._client = client
                ready.set_result(tools)
                await stop.wait()
        except Exception as error:
            if not ready.done():
                failure, _ = self._classify(method, error)
                refusal = _handshake_refusal(method, error)
                if refusal is not None and isinstance(self.endpoint.launch, HttpLaunch):
                    self._refused = refusal
                    url = _shown_url(self.endpoint.launch)
                    failure = McpError(
                        f"{self.label} did not accept the MCP handshake at {url} ({refusal})",
                        RetryClass.PERMANENT,
                    )
                ready.set_exception(failure)
            else:
                log.debug("%s connection ended: %s", self.label, _describe(error))
        finally:
            self._client = None
            if not ready.done():
                ready.set_exception(
                    McpError(f"{self.label} was stopped during start", INDETERMINATE)
                )

    async def _list(self, client: Client) -> list[RemoteTool]:
        tools: list[RemoteTool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools += [
                RemoteTool(
                    safe_text(t.name), safe_text(t.description or ""), safe_json(t.input_schema)
                )
                for t in page.tools
            ]
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallReport:
        """Call one tool; never raises for a server failure, never retries the call."""
        report = CallReport()
        client = await self._ready_client(report)
        if client is None:
            return report
        request = CallToolRequest(params=CallToolRequestParams(name=tool, arguments=arguments))
        try:
            # The session's read timeout is the deadline; this guard also bounds the write.
            with anyio.fail_after(self.timeout + 1):
                raw = await client.session.send_request(request, RawResult)
            report.result = safe_json(raw.model_dump())
        except Exception as error:
            report.error, lost = self._classify("tools/call", error)
            if lost:
                self._stop.set()
                self._restarts.lost(report)
            return report
        self._restarts.succeeded()
        return report

    async def _ready_client(self, report: CallReport) -> Client | None:
        async with self._restart_lock:
            if self.alive:
                return self._client
            if not await self._restarts.attempt(report, self._start_again):
                return None
            return self._client

    async def _start_again(self) -> None:
        await self._reap()
        await self._connect(list_tools=False)

    def _classify(self, method: str, error: BaseException) -> tuple[McpError, bool]:
        """The MCP error for a failed request, and whether the connection is lost."""
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        label = self.label
        if isinstance(error, McpError):
            return error, True
        if isinstance(error, TimeoutError) or (
            isinstance(error, MCPError) and error.code == REQUEST_TIMEOUT
        ):
            return McpError(f"{label} request deadline exceeded: {method}", INDETERMINATE), False
        if isinstance(error, MCPError) and error.code == CONNECTION_CLOSED:
            closed = "the connection" if isinstance(self.endpoint.launch, HttpLaunch) else "stdout"
            return McpError(f"{label} closed {closed} during {method}", INDETERMINATE), True
        if isinstance(error, MCPError):
            text = safe_text(error.error.message)
            return McpError(f"JSON-RPC {error.code}: {text}", INDETERMINATE), False
        if isinstance(error, ValidationError):
            message = f"{label} answered {method} outside the MCP schema"
            return McpError(message, RetryClass.PERMANENT), False
        message = f"{label} failed during {method}: {safe_text(_describe(error))}"
        return McpError(message, INDETERMINATE), True

    async def _reap(self) -> None:
        owner, self._owner = self._owner, None
        if owner is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(owner), self.grace + OWNER_SLACK_SECS)
        except TimeoutError:
            owner.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await owner

    async def close(self) -> None:
        """Stop the server: close its stdin, wait the grace period, then kill it."""
        await self._reap()
