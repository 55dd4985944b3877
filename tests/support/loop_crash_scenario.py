"""The scripted life a crash-looped being lives: tool-heavy rounds, cycle ends, gateway errors.

Turn `n` of the script is a pure function of `n`, so a checker knows what every round asked
for. Most turns ask for a memory and a workspace file write (two tool calls, each journaled
and saved); every 7th ends the cycle with plain text, every 23rd is a gateway error (the
reservation is released and the cycle ends with a warning), every 11th also recalls memories.
Workspace contents are a pure function of their version, so a checker can tell a whole
version from a torn one. Every answer takes `ANSWER_SECS`, as a model's does: a loopback
answer is otherwise back within a millisecond, and few kills would fall during a call.
"""

from __future__ import annotations

import hashlib
import json

from singularity.testing.scripted_server import Call, Turn

FILES = ("c.txt", "notes/a.txt", "notes/b.txt", "deep/er/d.txt")
REMEMBER = "singularity_memory_remember"
RECALL = "singularity_memory_recall"
WRITE = "singularity_file_write"
ANSWER_SECS = 0.02


def file_content(version: int) -> str:
    """The text a write of `version` puts in its file: a header, then 0 to ~1.5 KB of body."""
    digest = hashlib.sha256(str(version).encode()).hexdigest()
    return f"version {version}\n" + digest * (version % 24)


def file_version(text: str) -> int | None:
    """The version a file holds, or None when its text is not exactly a version's text."""
    header, _, _ = text.partition("\n")
    name, _, number = header.partition(" ")
    if name != "version" or not number.isdigit():
        return None
    version = int(number)
    return version if text == file_content(version) else None


def turn(index: int) -> Turn:
    """Script turn number `index`, answered after `ANSWER_SECS`."""
    return _answer(index).delayed(ANSWER_SECS)


def _answer(index: int) -> Turn:
    if index % 23 == 22:
        return Turn.error(500, f"scripted outage {index}")
    if index % 7 == 6:
        return Turn.text(f"cycle done at turn {index}")
    calls = [
        Call(REMEMBER, json.dumps({"kind": "crash-loop", "text": f"memory {index}"})),
        Call(
            WRITE,
            json.dumps({"path": FILES[index % len(FILES)], "content": file_content(index)}),
        ),
    ]
    if index % 11 == 3:
        calls.append(Call(RECALL, json.dumps({"query": f"memory {index - 1}"})))
    return Turn.tool_calls(*calls, content=f"turn {index}" if index % 2 else None)


def turns(first: int, count: int) -> list[Turn]:
    """Turns `first` to `first + count - 1`."""
    return [turn(index) for index in range(first, first + count)]
