"""A real process that spawns children or boots a being with failpoints armed, for crash tests.

Usage: children_worker.py MODE FAILPOINTS SETTINGS_JSON

- `spawn`: open the being (resuming it when it has a state), arm the failpoints, then call
  `singularity_spawn_child` with `arguments` as a cycle would; the child runs
  `child_command` (default: the real program). Prints the outcome as JSON.
- `boot`: arm the failpoints, boot the being as `run` does (reconcile, settle its children,
  claim its own grant when it is new), shut it down.

SETTINGS_JSON holds `flags` (option values), `secrets` (raw credentials, as the environment
would carry them), and for `spawn` the `arguments` and optional `child_command`. A `kill`
failpoint ends the process with SIGKILL at that exact step.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from singularity.config import resolve
from singularity.runtime.family import children
from singularity.runtime.loop.lifecycle import Runtime
from singularity.storage import fsio
from tests.support.children_inproc import open_parent, spawn_call


def main() -> None:
    mode, failpoints, document = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    settings = resolve(document["flags"], environ=document.get("secrets", {}))
    if mode == "spawn":
        command = document.get("child_command")
        if command is not None:
            children.child_command = lambda: list(command)
        exists = os.path.exists(os.path.join(settings.state_dir, "state.json"))
        being = open_parent(settings, resume=exists)
        fsio.arm_failpoints(failpoints)
        outcome = spawn_call(being, settings, document["arguments"])
        being.close()
        print(
            json.dumps(
                {
                    "status": outcome.status.value,
                    "content": outcome.content,
                    "error_code": outcome.error_code,
                }
            )
        )
    elif mode == "boot":
        fsio.arm_failpoints(failpoints)
        runtime = Runtime.boot(settings)
        asyncio.run(runtime.shutdown())
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
