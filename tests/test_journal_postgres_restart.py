"""A living being's PostgreSQL journal survives the server restarting under it.

The test starts its own server, lets a being write through its tools, restarts the
server (every connection cut), and the being writes and recalls again in the same
process; the activity journal says the connection was lost and came back. With the
server stopped, a write fails as an outcome the being sees (never a crash), and once the
server is back the next attempts succeed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import all_events, boot, run
from tests.support.polling import DEFAULT_TIMEOUT
from tests.support.postgres import Server, postgres_server, start_server

WRITE, RECALL = "singularity_journal_write", "singularity_journal_recall"


@pytest.fixture
def server() -> Iterator[Server]:
    postgres_server()  # skips when the package is missing
    own = start_server()
    yield own
    own.stop()


def _warnings(root: Path) -> list[str]:
    return [str(e["message"]) for e in all_events(root) if e["type"] == "warning"]


async def _call(runtime: Any, name: str, **arguments: Any) -> dict[str, Any]:
    outcome = await runtime.life.catalogue.dispatch(name, json.dumps(arguments))
    return {"status": outcome.status.value, "error_code": outcome.error_code, **outcome.content}


def test_the_being_reconnects_after_a_server_restart(tmp_path: Path, server: Server) -> None:
    script = [
        Turn.tool_call(WRITE, {"text": "before the restart"}),
        Turn.text("one"),
        Turn.tool_call(WRITE, {"text": "after the restart"}),
        Turn.tool_call(RECALL, {"query": "the restart", "k": 5}),
        Turn.text("two"),
    ]

    async def live(gateway: ScriptedServer) -> dict[str, Any]:
        runtime = boot(tmp_path, gateway, journal_url=server.url, journal_embedder="hashing")
        try:
            await runtime.once()
            server.restart()
            await runtime.once()
            # The server goes away: a write fails as an outcome, and the being lives on.
            server.halt()
            down = await _call(runtime, WRITE, text="while the server is down")
            assert (down["status"], down["error_code"]) == ("failed", "journal_unavailable")
            assert "unreachable" in down["message"]
            server.resume()
            deadline = time.monotonic() + DEFAULT_TIMEOUT  # past the link's backoff (60 s)
            while True:
                again = await _call(runtime, WRITE, text="the server is back")
                if again["status"] == "success" or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            return again
        finally:
            await runtime.shutdown()

    with ScriptedServer(script) as gateway:
        back = run(live(gateway))
        requests = [request.json for request in gateway.completions]
    assert back["status"] == "success", back
    recall = json.loads(requests[-1]["messages"][-1]["content"])
    assert recall["status"] == "success"
    texts = {entry["text"] for entry in recall["content"]["entries"]}
    assert texts == {"before the restart", "after the restart"}
    warnings = _warnings(tmp_path)
    lost = [w for w in warnings if w.startswith("the journal database connection was lost")]
    came_back = [w for w in warnings if w.startswith("the journal database connection is back")]
    assert len(lost) == 2 and len(came_back) == 2, warnings
