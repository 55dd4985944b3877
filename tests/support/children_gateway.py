"""A scripted gateway shared by a family of beings, answering each being from its own plan.

Parent, children and grandchildren all inherit one `BRAMA_BASE_URL`, so they talk to the
same server concurrently. The server tells them apart by the name in the system message
(the compiled-in prompt starts `You are <name>, an autonomous digital being`), counts
every being's completion requests, and answers request number `n` of being `name` with
`plan(name, n)`; `None` means the server's default turn (a plain `idle` text).

With `completion_tokens`, every answer reports that many completion tokens (and 100 prompt
tokens): priced by output tokens only, each call then costs exactly what the runtime
reserved for it (`max_tokens` at the output price), whatever the size of the prompt, so
how many calls a budget buys does not change when the catalogue or the prompt grows.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from singularity.gateway.auth import verify_hmac
from singularity.jsoncodec import compact
from singularity.testing.scripted_server import RecordedRequest, ScriptedServer, Turn

Plan = Callable[[str, int], Turn | None]
_NAME = re.compile(r"You are (.+?), an autonomous digital being", re.DOTALL)


def agent_of(document: Any) -> str | None:
    """The being's name, read from the system message of a completion request."""
    if not isinstance(document, dict):
        return None
    messages = document.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
        return None
    content = messages[0].get("content")
    if not isinstance(content, str):
        return None
    match = _NAME.match(content)
    return match.group(1) if match else None


def no_plan(name: str, number: int) -> Turn | None:
    """Every being gets the default turn."""
    return None


class FamilyGateway(ScriptedServer):
    """A `ScriptedServer` whose completions follow a per-being plan (text and tool calls)."""

    def __init__(
        self, plan: Plan = no_plan, *, completion_tokens: int | None = None, **options: Any
    ) -> None:
        super().__init__(**options)
        self.plan = plan
        self.usage = (
            None
            if completion_tokens is None
            else {
                "prompt_tokens": 100,
                "completion_tokens": completion_tokens,
                "total_tokens": 100 + completion_tokens,
            }
        )
        self.counts: Counter[str] = Counter()
        self.refused = 0

    def requests_of(self, name: str) -> int:
        """How many completion requests the being named `name` made (refused ones excluded)."""
        with self._lock:
            return self.counts[name]

    def _complete(self, handler: Any, request: RecordedRequest) -> None:
        if self._secret is not None:
            verdict = verify_hmac(
                request.headers,
                request.body,
                self._secret,
                clock=self._clock,
                window_seconds=self._window,
            )
            if not verdict.ok:
                with self._lock:
                    self.refused += 1
                handler.reply(401, b'{"error":{"message":"invalid signature"}}')
                return
        name = agent_of(request.json)
        with self._lock:
            number = self.counts[name or ""]
            self.counts[name or ""] += 1
        turn = self.plan(name, number) if name is not None else None
        if turn is None:
            turn = self.default
        if turn is None:
            handler.reply(500, b'{"error":{"message":"script exhausted"}}')
            return
        if turn.delay > 0 and self._stopping.wait(turn.delay):
            handler.drop()
            return
        if turn.kind not in ("text", "tool_calls"):
            raise ValueError(f"the family gateway answers text and tool calls, not {turn.kind}")
        if self.usage is not None:
            turn = dataclasses.replace(turn, usage=self.usage)
        handler.reply(200, compact(self._completion(turn, request)).encode("utf-8"))


def spawn_turn(name: str, ticker: str, specialty: str, budget: str | None = None) -> Turn:
    """A tool call asking for a child."""
    arguments = {"name": name, "ticker": ticker, "specialty": specialty}
    if budget is not None:
        arguments["budget"] = budget
    return Turn.tool_call("singularity_spawn_child", arguments)
