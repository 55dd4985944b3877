"""A real process that hammers state-changing tool calls, for crash tests.

Usage: state_worker.py STATE_DIR FIRST_INDEX
Boots the being (new or resumed), then forever: remembers memory number N (and every
few calls adds a rule, a learning or a new prompt), printing `ack N` after each call
returned, i.e. after its save finished.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from singularity.config import resolve
from singularity.domain.records import ToolCall
from singularity.runtime.being import open_being
from singularity.runtime.catalogue import mind_toolsets
from singularity.runtime.tool_call import execute_tool_call
from singularity.tools.catalogue import Catalogue


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
    catalogue = Catalogue(mind_toolsets(being.state))
    print("ready", flush=True)
    index = first
    while True:
        await execute_tool_call(
            being,
            catalogue,
            _call(
                index, "singularity_memory_remember", {"kind": "crash", "text": f"memory {index}"}
            ),
        )
        print(f"ack {index}", flush=True)
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


if __name__ == "__main__":
    asyncio.run(hammer(sys.argv[1], int(sys.argv[2])))
