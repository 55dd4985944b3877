"""A booted being's heap is frozen out of the collector's full passes until its shutdown."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from singularity.runtime.loop.lifecycle import Runtime
from singularity.testing.scripted_server import ScriptedServer
from tests.support.loop_http import settings


def test_boot_freezes_what_it_loaded_and_shutdown_releases_it(tmp_path: Path) -> None:
    with ScriptedServer() as server:

        async def live() -> tuple[int, bool, int]:
            runtime = Runtime.boot(settings(tmp_path, server))
            frozen = gc.get_freeze_count()
            state_frozen = not any(runtime.being.state is o for o in gc.get_objects())
            await runtime.once()
            await runtime.shutdown()
            return frozen, state_frozen, gc.get_freeze_count()

        frozen, state_frozen, after = asyncio.run(live())
    assert frozen > 0
    assert state_frozen  # the loaded state is out of the generations the collector walks
    assert after == 0
