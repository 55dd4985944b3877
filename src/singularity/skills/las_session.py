"""The Las wire (spec §13.3-13.4): raw JSON-RPC lines over stdio, exactly as Las expects.

Servers of the skills file speak standard MCP through the SDK (`session`); Las keeps the
original's dialect, which the SDK cannot speak: `initialize` offers protocol
`2024-11-05` and refuses any other version in the reply, no `notifications/initialized`
follows, and `tools/list` carries params `{}` and is read once (no pagination). Request
ids are integers from 1. Each request has the configured deadline, and the reply is read
line by line: blank lines and notifications are skipped, a line that is not JSON is a
permanent error at once, the end of stdout is `Las closed stdout`. A reply to a request
whose deadline passed is recognised by its id and dropped (§23.14).

A Las that stopped is started again for a later call, with the same growing back-off as
any skill server; the call that found it stopped is reported, never replayed.
"""

from __future__ import annotations

import json
import logging
import subprocess
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from singularity.errors import McpError, RetryClass
from singularity.jsoncodec import compact
from singularity.secrets import os_error_text
from singularity.skills.endpoints import Endpoint, StdioLaunch
from singularity.skills.session import CallReport, RemoteTool, Restarts
from singularity.skills.transport import DEFAULT_SCHEMA, MAX_LINE_BYTES, stop_process
from singularity.version import __version__

log = logging.getLogger(__name__)
PROTOCOL_VERSION = "2024-11-05"
PERMANENT = RetryClass.PERMANENT
INDETERMINATE = RetryClass.INDETERMINATE


class _Closed(Exception):
    """Las closed its stdout."""


@dataclass
class _Process:
    """One running Las: the process, its buffered stdout, the ids it may still answer."""

    process: Process
    stdout: BufferedByteReceiveStream
    next_id: int = 1
    abandoned: set[int] = field(default_factory=set)
    closed: bool = False


class LasConnection:
    """A supervised connection to the Las aggregator, speaking its own JSON-RPC dialect."""

    def __init__(self, endpoint: Endpoint, *, timeout: float, grace: float) -> None:
        if not isinstance(endpoint.launch, StdioLaunch):
            raise TypeError("Las is always a stdio process")
        self.endpoint = endpoint
        self.launch: StdioLaunch = endpoint.launch
        self.timeout = timeout
        self.grace = grace
        self._las: _Process | None = None
        self._lock = anyio.Lock()
        self._restarts = Restarts(endpoint.label)

    @property
    def label(self) -> str:
        """How messages name Las."""
        return self.endpoint.label

    @property
    def alive(self) -> bool:
        """Whether Las is running and has not closed its stdout."""
        return self._las is not None and not self._las.closed

    async def open(self) -> list[RemoteTool]:
        """Start Las, hand-shake and list its tools; any failure stops it again."""
        async with self._lock:
            await self._start()
            try:
                return _tools(self.label, await self._request("tools/list", {}))
            except BaseException:
                await self._stop()
                raise

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallReport:
        """Call one tool; never raises for a Las failure, never retries the call."""
        report = CallReport()
        async with self._lock:
            if not self.alive and not await self._restarts.attempt(report, self._start_again):
                return report
            try:
                result = await self._request("tools/call", {"name": tool, "arguments": arguments})
            except McpError as error:
                report.error = error
                if not self.alive:
                    self._restarts.lost(report)
                return report
        if not isinstance(result, dict):
            message = f"{self.label} answered tools/call with a result that is not an object"
            report.error = McpError(message, PERMANENT)
            return report
        self._restarts.succeeded()
        report.result = result
        return report

    async def close(self) -> None:
        """Stop Las: close its stdin, wait the grace period, then kill it."""
        async with self._lock:
            await self._stop()

    async def _start(self) -> None:
        try:
            process = await anyio.open_process(
                list(self.launch.argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,
                cwd=self.launch.cwd,
                env=dict(self.launch.env),
                start_new_session=True,  # a Ctrl-C for the being does not reach it
            )
        except OSError as error:
            raise McpError(f"cannot start {self.label}: {os_error_text(error)}") from None
        assert process.stdout is not None
        self._las = _Process(process, BufferedByteReceiveStream(process.stdout))
        params: dict[str, Any] = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "singularity", "version": __version__},
            **self.launch.initialize_extra,
        }
        try:
            result = await self._request("initialize", params)
            if not isinstance(result, dict) or result.get("protocolVersion") != PROTOCOL_VERSION:
                raise McpError(f"{self.label} negotiated an unsupported MCP version", PERMANENT)
        except BaseException:
            await self._stop()
            raise

    async def _start_again(self) -> None:
        await self._stop()
        await self._start()

    async def _stop(self) -> None:
        las, self._las = self._las, None
        if las is not None:
            with anyio.CancelScope(shield=True):
                await stop_process(las.process, self.grace, self.label)

    async def _request(self, method: str, params: dict[str, Any]) -> Any:
        """Send one request and read its reply under the deadline; errors are `McpError`s."""
        las = self._las
        if las is None or las.closed:
            raise McpError(f"{self.label} closed stdout", INDETERMINATE)
        request_id = las.next_id
        las.next_id += 1
        line = compact({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        try:
            with anyio.fail_after(self.timeout):
                await self._write(las, line)
                return await self._reply(las, request_id)
        except TimeoutError:
            las.abandoned.add(request_id)
            message = f"{self.label} request deadline exceeded: {method}"
            raise McpError(message, INDETERMINATE) from None
        except McpError:
            las.abandoned.add(request_id)  # its reply, if one still comes, is not the next's
            raise

    async def _write(self, las: _Process, line: str) -> None:
        assert las.process.stdin is not None
        try:
            await las.process.stdin.send((line + "\n").encode("utf-8", "surrogatepass"))
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as error:
            las.closed = True
            text = os_error_text(error) if isinstance(error, OSError) else "the pipe is closed"
            raise McpError(f"cannot write to {self.label}: {text}", INDETERMINATE) from None

    async def _reply(self, las: _Process, request_id: int) -> Any:
        while True:
            try:
                line = await self._line(las)
            except _Closed:
                las.closed = True
                raise McpError(f"{self.label} closed stdout", INDETERMINATE) from None
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError as error:
                raise McpError(f"non-JSON {self.label} stdout: {error}", PERMANENT) from None
            if not isinstance(message, dict) or "id" not in message:
                continue  # a notification
            if message["id"] != request_id:
                if message["id"] in las.abandoned:
                    las.abandoned.discard(message["id"])
                    log.info("%s answered request %s late; dropped", self.label, message["id"])
                    continue
                raise McpError(f"{self.label} returned an unexpected response id", PERMANENT)
            return _result(self.label, message)

    async def _line(self, las: _Process) -> bytes:
        try:
            return await las.stdout.receive_until(b"\n", MAX_LINE_BYTES)
        except (
            anyio.IncompleteRead,
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
        ):
            raise _Closed from None
        except anyio.DelimiterNotFound:
            raise McpError(
                f"{self.label} wrote a line over {MAX_LINE_BYTES} bytes on stdout", PERMANENT
            ) from None


def _result(label: str, message: dict[str, Any]) -> Any:
    error = message.get("error")
    if error is not None:
        code = error.get("code") if isinstance(error, dict) else None
        text = error.get("message") if isinstance(error, dict) else None
        raise McpError(f"JSON-RPC {code}: {text}", INDETERMINATE)
    if "result" not in message:
        raise McpError(f"{label} response has no result", PERMANENT)
    return message["result"]


def _tools(label: str, result: Any) -> list[RemoteTool]:
    tools = result.get("tools") if isinstance(result, dict) else None
    if not isinstance(tools, list):
        raise McpError(f"{label} answered tools/list without a tools array", PERMANENT)
    listed = []
    for tool in tools:
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str):
            raise McpError(f"{label} listed a tool without a string name", PERMANENT)
        description = tool.get("description")
        schema = tool.get("inputSchema", dict(DEFAULT_SCHEMA))
        listed.append(RemoteTool(name, description if isinstance(description, str) else "", schema))
    return listed
