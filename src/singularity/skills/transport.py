"""The ways to reach a skill server: a child process over stdio, streamable HTTP, or SSE.

The stdio transport is our own rather than the SDK's because the spec fixes what the
SDK leaves open: the child's environment is exactly the scrubbed set (the SDK adds
`HOME`, `USER` and others), the grace period before the kill is configurable, a line on
stdout that is not JSON-RPC is dropped with a warning instead of reaching the session,
and a listed tool without `inputSchema` gets the spec's default object schema.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import httpx2
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCRequest, JSONRPCResponse, jsonrpc_message_adapter

from singularity.errors import McpError
from singularity.secrets import os_error_text
from singularity.skills.endpoints import HttpLaunch, StdioLaunch
from singularity.skills.stderr_log import StderrLog

log = logging.getLogger(__name__)
Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]
DEFAULT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
MAX_LINE_BYTES = 16 * 1024 * 1024
KILL_WAIT_SECS = 5.0
_POLL_SECS = 0.02


@asynccontextmanager
async def stdio_transport(
    launch: StdioLaunch, label: str, grace: float, on_exit: Callable[[], None]
) -> AsyncIterator[Streams]:
    """Start the process, bridge its pipes to the session, stop it with grace then a kill."""
    try:
        process = await anyio.open_process(
            list(launch.argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None if launch.stderr_log is None else subprocess.PIPE,
            cwd=launch.cwd,
            env=dict(launch.env),
            # Its own process group: a Ctrl-C meant for the being does not reach it, and
            # the kill at shutdown reaches whatever it started.
            start_new_session=True,
        )
    except OSError as error:
        raise McpError(f"cannot start {label}: {os_error_text(error)}") from None
    inbound_send, inbound = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outbound, outbound_receive = anyio.create_memory_object_stream[SessionMessage](0)
    listings: set[Any] = set()
    async with anyio.create_task_group() as group:
        if launch.stderr_log is not None:
            group.start_soon(_keep_stderr, process, StderrLog(launch.stderr_log))
        group.start_soon(_read, process, inbound_send, label, listings, on_exit)
        group.start_soon(_write, process, outbound_receive, launch.initialize_extra, listings)
        try:
            yield inbound, outbound
        finally:
            with anyio.CancelScope(shield=True):
                await stop_process(process, grace, label)
            group.cancel_scope.cancel()
            for stream in (inbound, outbound):
                stream.close()


async def _keep_stderr(process: Process, sink: StderrLog) -> None:
    """Copy the server's stderr to its log until the pipe closes."""
    assert process.stderr is not None
    try:
        async for chunk in process.stderr:
            sink.write(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        pass  # the server is gone
    finally:
        sink.close()


async def _read(
    process: Process,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    label: str,
    listings: set[Any],
    on_exit: Callable[[], None],
) -> None:
    assert process.stdout is not None
    buffer = bytearray()
    skipping = False  # inside a line that grew past the limit
    try:
        async with sink:
            async for chunk in process.stdout:
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if skipping:
                        skipping = False
                        continue
                    message = _parse(line, label, listings)
                    if message is not None:
                        await sink.send(message)
                if len(buffer) > MAX_LINE_BYTES:
                    log.warning(
                        "%s wrote a line over %d bytes on stdout; dropped", label, len(buffer)
                    )
                    buffer.clear()
                    skipping = True
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        pass  # the session or the pipe is gone; shutdown reaps the process
    finally:
        on_exit()


def _parse(line: bytes, label: str, listings: set[Any]) -> SessionMessage | None:
    text = line.strip()
    if not text:
        return None
    try:
        message = jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:  # not JSON, or JSON that is not a JSON-RPC message
        log.warning("%s wrote a line that is not JSON-RPC on stdout; ignored: %.120r", label, text)
        return None
    if isinstance(message, JSONRPCResponse) and message.id in listings:
        listings.discard(message.id)
        tools = message.result.get("tools")
        for tool in tools if isinstance(tools, list) else []:
            if isinstance(tool, dict) and "inputSchema" not in tool:
                tool["inputSchema"] = dict(DEFAULT_SCHEMA)  # spec §10.1's default
    return SessionMessage(message)


async def _write(
    process: Process,
    source: MemoryObjectReceiveStream[SessionMessage],
    initialize_extra: Mapping[str, Any],
    listings: set[Any],
) -> None:
    assert process.stdin is not None
    try:
        async with source:
            async for item in source:
                message = item.message
                if isinstance(message, JSONRPCRequest):
                    if message.method == "initialize" and initialize_extra:
                        message.params = {**(message.params or {}), **initialize_extra}
                    elif message.method == "tools/list":
                        listings.add(message.id)
                data = message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await process.stdin.send(data.encode("utf-8"))
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        pass  # a dead server: its stdout ends too, and the session sees the close


async def stop_process(process: Process, grace: float, label: str) -> None:
    """Close stdin, wait up to `grace` for the exit, then kill the process group and reap."""
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    if not await _exited(process, grace):
        log.warning("%s did not exit within %.3gs of closing its stdin; killing it", label, grace)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if not await _exited(process, KILL_WAIT_SECS):
            log.error("%s (pid %d) survived SIGKILL; abandoning it", label, process.pid)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.aclose()


async def _exited(process: Process, seconds: float) -> bool:
    # Polled: `wait()` also waits for the pipes to close, which a grandchild can hold open.
    deadline = anyio.current_time() + seconds
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(_POLL_SECS)
    return True


HTTP_CONNECT_SECS = 30.0
HTTP_READ_SECS = 300.0


@asynccontextmanager
async def http_transport(launch: HttpLaunch) -> AsyncIterator[Any]:
    """The SDK's streamable-HTTP transport, with the configured headers."""
    timeout = httpx2.Timeout(HTTP_CONNECT_SECS, read=HTTP_READ_SECS)
    async with (
        httpx2.AsyncClient(headers=dict(launch.headers), timeout=timeout) as http,
        streamable_http_client(launch.url, http_client=http) as streams,
    ):
        yield streams


@asynccontextmanager
async def sse_transport(launch: HttpLaunch) -> AsyncIterator[Any]:
    """The SDK's SSE transport (the protocol's earlier HTTP form), with the configured headers."""
    async with sse_client(
        launch.url,
        headers=dict(launch.headers),
        timeout=HTTP_CONNECT_SECS,
        sse_read_timeout=HTTP_READ_SECS,
    ) as streams:
        yield streams
