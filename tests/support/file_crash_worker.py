"""A stream of workspace writes to be killed with SIGKILL at random moments.

Usage: file_crash_worker.py WORKSPACE LOG

The process imports the runtime once, then serves commands read from stdin, one per
line: `SEED MODE FAILPOINTS` (MODE `walk` or `auto`, FAILPOINTS an `fsio` spec or `-`).
For each it forks a writer, prints the writer's pid, waits for it and prints its exit
code (`-9` when killed). Forking after the imports keeps each kill cheap.

A writer appends `S <file> <version>` to LOG before each write and `D <file> <version>`
after it (unbuffered appends, which a SIGKILL cannot tear). Contents are a pure function
of (file, version), so a checker knows the old and the new content of every target.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys

from singularity.storage import fsio
from singularity.tools.confinement import Workspace
from singularity.tools.files import write_file

FILES = ("top.txt", "a/one.txt", "a/b/two.txt", "c/three.md", "deep/er/still/four.txt")


def content(index: int, version: int) -> str:
    """The deterministic text of `FILES[index]` at `version`, up to about 300 KB."""
    rng = random.Random(f"{index}:{version}")
    size = rng.choice((0, 10, 1000, 4096, 65_537, 300_000))
    seed = hashlib.sha256(f"{index}:{version}".encode()).hexdigest()
    body = (seed + "\u00e9\n") * (size // 66 + 1)
    return f"file {index} version {version}\n{body[:size]}"


def write_forever(workspace: str, log_path: str, seed: int, walk: bool) -> None:
    """Write random targets until killed; return only if a write fails."""
    ws = Workspace(workspace, use_openat2=False if walk else None)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    rng = random.Random(seed)
    counter = 0
    while True:
        counter += 1
        index = rng.randrange(len(FILES))
        version = seed * 1_000_000 + counter
        os.write(log, f"S {index} {version}\n".encode())
        outcome = write_file(ws, {"path": FILES[index], "content": content(index, version)})
        if outcome.error_code is not None:
            sys.stderr.write(f"{outcome}\n")
            return
        os.write(log, f"D {index} {version}\n".encode())


def serve(workspace: str, log_path: str) -> None:
    """Fork one writer per command line on stdin; report its pid and its exit code."""
    for line in sys.stdin:
        seed, mode, points = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                fsio.arm_failpoints("" if points == "-" else points)
                write_forever(workspace, log_path, int(seed), mode == "walk")
            finally:
                os._exit(3)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
