"""Real processes that hammer state-changing tool calls, for crash tests.

Usage: state_worker.py

The process imports the runtime once, then serves commands read from stdin, one per
line: `STATE_DIR FIRST_INDEX` forks a worker; the next line, `kill`, SIGKILLs it, and
the server prints the worker's exit code (`exit -9`). The worker boots the being (new or
resumed) and prints `ready`, then forever: remembers memory number N (and every few
calls adds a rule, a learning or a new prompt), printing `ack N` after each call
returned, i.e. after its save finished. Forking after the imports keeps each kill cheap;
the server kills before it reaps, so the pid it kills is always its own worker's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import traceback

from singularity.config import resolve
from singularity.domain.records import ToolCall
from singularity.runtime.being import open_being
from singularity.runtime.inspect.catalogue import mind_toolsets
from singularity.runtime.loop.tool_call import execute_tool_call
from singularity.tools.catalogue import Catalogue
from singularity.tools.output_boundary import STRICT


def _say(line: str) -> None:
    """One line in one write: a kill can never leave half of it for the next line to join."""
    os.write(sys.stdout.fileno(), f"{line}\n".encode())


def _call(index: int, name: str, arguments: dict[str, str]) -> ToolCall:
    return {
        "id": f"call_{index}_{name}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


async def hammer(state_dir: str, first: int) -> None:
    settings = resolve({"state_dir": state_dir}, environ={})
    resume = os.path.exists(os.path.join(state_dir, "state.json"))
    being = open_being(settings, resume=resume)
    being.state.status = "running"
    being.save()
    catalogue = Catalogue(mind_toolsets(being.state), boundary=STRICT)
    _say("ready")
    index = first
    while True:
        await execute_tool_call(
            being,
            catalogue,
            _call(
                index, "singularity_memory_remember", {"kind": "crash", "text": f"memory {index}"}
            ),
        )
        _say(f"ack {index}")
        if index % 5 == 0:
            await execute_tool_call(
                being,
                catalogue,
                _call(index, "singularity_self_add_rule", {"rule": f"rule {index}"}),
            )
        if index % 7 == 0:
            await execute_tool_call(
                being,
                catalogue,
                _call(index, "singularity_self_set_prompt", {"prompt": f"prompt {index} " * 50}),
            )
        index += 1


def serve() -> None:
    """Fork one worker per command on stdin, SIGKILL it when told; report its exit code."""
    for line in sys.stdin:
        state_dir, first = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                asyncio.run(hammer(state_dir, int(first)))
            except BaseException:
                traceback.print_exc()  # to the test's stderr; the worker then says it ended
            finally:
                _say("ended")  # only a worker that stopped by itself gets here
                os._exit(3)
        if sys.stdin.readline().strip() == "kill":
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        _say(f"exit {os.waitstatus_to_exitcode(status)}")


if __name__ == "__main__":
    serve()
