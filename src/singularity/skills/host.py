"""The skill host: every connection lives on a private event loop in one daemon thread.

Boot is synchronous and the `tools` command has no loop of its own, yet a connection must
stay open, owned by one task, for the whole life of the being. Hosting the connections
on their own loop serves all three callers alike, and a being's slow save never stalls
the reading of a server's pipe. Calls cross threads through futures, so cancelling a
call on the caller's loop cancels it on the host's. Las speaks its own dialect
(`las_session`); every other server speaks MCP through the SDK (`session`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from singularity.errors import McpError
from singularity.skills.endpoints import Endpoint
from singularity.skills.las_session import LasConnection
from singularity.skills.session import CallReport, Connection, RemoteTool

log = logging.getLogger(__name__)
T = TypeVar("T")
JOIN_SECS = 5.0


class SkillHost:
    """The connections to every configured skill server, on their own loop and thread."""

    def __init__(self, endpoints: Sequence[Endpoint], *, timeout: float, grace: float) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="singularity-skills", daemon=True
        )
        self._thread.start()
        self.connections = [
            self._run(self._make(endpoint, timeout, grace)) for endpoint in endpoints
        ]
        self._closed = False

    @staticmethod
    async def _make(endpoint: Endpoint, timeout: float, grace: float) -> Connection | LasConnection:
        # Made on this loop, so its events and locks bind to it.
        if endpoint.is_las:
            return LasConnection(endpoint, timeout=timeout, grace=grace)
        return Connection(endpoint, timeout=timeout, grace=grace)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def open(self) -> list[list[RemoteTool]]:
        """Start every server at once and list their tools; on any failure close them all."""

        async def open_all() -> list[list[RemoteTool]]:
            results = await asyncio.gather(
                *(connection.open() for connection in self.connections), return_exceptions=True
            )
            failures = [result for result in results if isinstance(result, BaseException)]
            if failures:
                await self._close_all()
                raise failures[0]
            return [result for result in results if not isinstance(result, BaseException)]

        try:
            return self._run(open_all())
        except BaseException:
            self.close()
            raise

    async def call(self, index: int, tool: str, arguments: dict[str, Any]) -> CallReport:
        """Call a tool of connection `index` from any loop."""
        if self._closed:
            error = McpError(f"{self.connections[index].label} is shut down")
            return CallReport(error=error)
        future = asyncio.run_coroutine_threadsafe(
            self.connections[index].call(tool, arguments), self._loop
        )
        return await asyncio.wrap_future(future)

    async def _close_all(self) -> None:
        await asyncio.gather(*(connection.close() for connection in self.connections))

    async def aclose(self) -> None:
        """Stop every server (grace, then kill) without blocking the caller's loop."""
        if self._closed:
            return
        future = asyncio.run_coroutine_threadsafe(self._close_all(), self._loop)
        try:
            await asyncio.wrap_future(future)
        finally:
            self._stop_thread()

    def close(self) -> None:
        """Stop every server, blocking; for callers without a loop."""
        if self._closed:
            return
        try:
            self._run(self._close_all())
        finally:
            self._stop_thread()

    def _stop_thread(self) -> None:
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(JOIN_SECS)
        if self._thread.is_alive():
            log.warning("the skill host thread did not stop within %.0fs", JOIN_SECS)
            return
        self._loop.close()
