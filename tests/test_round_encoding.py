"""A cycle encodes each message of its requests once, however many rounds carry it.

A resumed being lives a cycle of several tool rounds on the scripted gateway while every
JSON encoding of request parts (`gateway.encoding`, where the runtime encodes messages
and the tools array) is recorded. The conversation grows by a few messages a round, and
every round's request carries all of them (the window is large): each message must have
been encoded once between them, so that context selection's token counts, the
reservation and the request body read the same bytes, and nothing is encoded again round
after round (`tests/test_wire_encoding.py` tests the cache itself).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest

from singularity.gateway import encoding
from singularity.jsoncodec import compact_utf8
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import bodies, boot, live_one_cycle, run

REMEMBER = "singularity_memory_remember"


def test_each_message_of_a_cycles_requests_is_encoded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ScriptedServer([Turn.text("born")]) as server:
        live_one_cycle(tmp_path, server)

    produced: list[bytes] = []

    def recorded(value: Any) -> bytes:
        encoded = compact_utf8(value)
        produced.append(encoded)
        return encoded

    rounds = 5
    script = [
        *(Turn.tool_call(REMEMBER, {"kind": "note", "text": f"fact {n}"}) for n in range(rounds)),
        Turn.text("done"),
    ]
    with ScriptedServer(script) as server:

        async def cycle() -> None:
            runtime = boot(tmp_path, server, resume="true")
            try:
                monkeypatch.setattr(encoding, "compact_utf8", recorded)
                report = await runtime.once()
                assert report.status == "completed"
            finally:
                monkeypatch.undo()
                await runtime.shutdown()

        run(cycle())
        sent = bodies(server)

    assert len(sent) == rounds + 1
    carried = [compact_utf8(message) for message in sent[-1]["messages"]]
    assert len(carried) > 2 * rounds  # the last request carries every round's messages
    counted = collections.Counter(produced)
    # The system text changes as memories grow; the framing opens this cycle.
    [framing] = [part for part in carried if b"Begin autonomous cycle 2." in part]
    conversation = [part for part in carried[1:] if part != framing]
    for message in conversation:  # every round's messages, carried to the rounds after it
        assert counted[message] == 1, message.decode()[:80]
    # Twice a cycle, not a round: the affordability check before the cycle frames it too,
    # and the gateway client keeps the tools array's bytes of its own.
    tools = compact_utf8(sent[-1]["tools"])
    assert json.loads(tools) == sent[0]["tools"]
    assert counted[framing] <= 2 and counted[tools] <= 2
    twice = {part.decode()[:60] for part, n in counted.items() if n > 1}
    assert twice <= {framing.decode()[:60], tools.decode()[:60]}
    assert max(counted.values()) <= 2


def fact(number: int) -> str:
    return f'fact {number} "ż" \\ end'


def test_kept_encodings_send_what_a_fresh_encoding_of_the_state_sends(tmp_path: Path) -> None:
    """Every round changes the mind (a memory remembered, the oldest of the prompt's 20 left
    out) and the window (the round's messages); each body must be the bytes a fresh
    encoding of the same document gives, its system message the mind as it then was."""
    with ScriptedServer([Turn.text("born")]) as server:
        live_one_cycle(tmp_path, server)
    rounds = 24
    script = [
        *(Turn.tool_call(REMEMBER, {"kind": "note", "text": fact(n)}) for n in range(rounds)),
        Turn.text("done"),
    ]
    with ScriptedServer(script) as server:

        async def cycle() -> None:
            runtime = boot(tmp_path, server, resume="true", max_tool_rounds=str(rounds + 1))
            try:
                assert (await runtime.once()).status == "completed"
            finally:
                await runtime.shutdown()

        run(cycle())
        raw = [request.body for request in server.completions]
    assert len(raw) == rounds + 1
    for number, body in enumerate(raw):  # `number` memories remembered before this request
        document = json.loads(body)
        assert body == compact_utf8(document)
        system = document["messages"][0]["content"]

        def remembered(n: int, system: str = system) -> bool:
            return f"note: {fact(n)}" in system

        assert not remembered(number)
        assert number == 0 or remembered(number - 1)
        assert number < 21 or not remembered(number - 21)  # only the 20 newest are shown
