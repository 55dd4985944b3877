"""OpenAI's streamed completions: `chat.completion.chunk` events as server-sent events.

A stream opens with the assistant's role, carries the answer's text as it is decoded
(`content` deltas), then every tool call whole (one `tool_calls` delta each, with its
index, id, name and arguments), a last chunk with the `finish_reason`, the usage chunk
when the client asked for it (`stream_options.include_usage`), and `data: [DONE]`.

`TextGate` decides what of a free answer may be streamed before the answer is complete:
text that could be the start of a tool call (a `<tool_call>` tag, a code fence, a JSON
object on a line of its own) is held back until the answer shows what it is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Final

from singularity.jsoncodec import compact

OPENERS: Final = ("<tool_call>", "```", "\n{", "\n[")
DONE: Final = b"data: [DONE]\n\n"


def event(document: Mapping[str, Any]) -> bytes:
    """One server-sent event carrying a JSON document."""
    return f"data: {compact(dict(document))}\n\n".encode()


class Chunks:
    """The chunk documents of one streamed completion (same id, model and time)."""

    def __init__(self, completion_id: str, model: str) -> None:
        self.id, self.model, self.created = completion_id, model, int(time.time())

    def chunk(self, delta: Mapping[str, Any], finish: str | None = None) -> bytes:
        """A chunk with one choice."""
        choice = {"index": 0, "delta": dict(delta), "finish_reason": finish}
        return event(self._document([choice]))

    def opening(self) -> bytes:
        """The first chunk: the assistant's role."""
        return self.chunk({"role": "assistant", "content": ""})

    def text(self, text: str) -> bytes:
        """A piece of the answer's text."""
        return self.chunk({"content": text})

    def calls(self, calls: list[dict[str, Any]]) -> list[bytes]:
        """One chunk per tool call, whole."""
        return [self.chunk({"tool_calls": [{"index": i, **call}]}) for i, call in enumerate(calls)]

    def usage(self, prompt: int, completion: int) -> bytes:
        """The usage chunk (no choices)."""
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        return event({**self._document([]), "usage": usage})

    def _document(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }


def error_event(message: str, kind: str) -> bytes:
    """An error inside a stream that had already begun (its status was already sent)."""
    return event({"error": {"message": message, "type": kind, "param": None, "code": None}})


class TextGate:
    """What of a free answer's text may be streamed so far (see the module docstring)."""

    def __init__(self) -> None:
        self.seen = ""
        self.sent = 0
        self.streamed = ""
        self.held = False

    def feed(self, delta: str) -> str:
        """Add decoded text; the part that is safe to stream now."""
        self.seen += delta
        if self.held:
            return ""
        text = "\n" + self.seen  # so that an answer opening with `{` counts as a line start
        cut = len(text)
        for opener in OPENERS:
            found = text.find(opener)
            if found >= 0:
                self.held, cut = True, min(cut, found)
                continue
            partial = [k for k in range(1, len(opener)) if text.endswith(opener[:k])]
            cut = min(cut, len(text) - max(partial, default=0))
        piece, self.sent = self.seen[self.sent : max(cut - 1, self.sent)], max(cut - 1, self.sent)
        if not self.streamed:
            piece = piece.lstrip()  # the answer may still open with a call after a blank
        self.streamed += piece
        return piece

    def rest(self, final: str) -> str:
        """What remains to stream of the final answer text, given what was sent."""
        return final[len(self.streamed) :] if final.startswith(self.streamed) else ""


def parse_event(line: bytes) -> Any:
    """The JSON document of one `data:` line (for tests and clients of our own)."""
    return json.loads(line.removeprefix(b"data: "))
