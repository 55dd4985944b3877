"""Wait for a condition instead of sleeping: the one way tests synchronise (docs/testing.md).

A fixed sleep is either too short on a loaded machine (a flake) or too long on an idle
one (a slow suite). `wait_for` polls the condition every `interval` seconds and fails
with `what` once `timeout` seconds have passed without it; the timeout is generous
because it only costs time when the test is failing anyway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

DEFAULT_TIMEOUT = 180.0
INTERVAL = 0.01


class _Deadline:
    def __init__(self, what: str, timeout: float) -> None:
        self.what, self.timeout = what, timeout
        self.at = time.monotonic() + timeout

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise AssertionError(f"timed out after {self.timeout:g} s waiting for {self.what}")


def wait_for(
    condition: Callable[[], object],
    what: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = INTERVAL,
) -> None:
    """Return once `condition()` is truthy; `AssertionError` naming `what` after `timeout`."""
    deadline = _Deadline(what, timeout)
    while not condition():
        deadline.check()
        time.sleep(interval)


async def wait_for_async(
    condition: Callable[[], object],
    what: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = INTERVAL,
) -> None:
    """`wait_for` inside an event loop: the loop keeps running while we wait."""
    deadline = _Deadline(what, timeout)
    while not condition():
        deadline.check()
        await asyncio.sleep(interval)


async def wait_for_awaited(
    condition: Callable[[], Awaitable[object]],
    what: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.1,
) -> None:
    """`wait_for_async` of a condition that must be awaited (a query to a server)."""
    deadline = _Deadline(what, timeout)
    while not await condition():
        deadline.check()
        await asyncio.sleep(interval)
