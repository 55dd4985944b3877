"""A stream of workspace writes to be killed with SIGKILL at random moments.

Usage: file_crash_worker.py WORKSPACE LOG SEED [--walk] [--failpoints SPEC]

Before each write it appends `S <file> <version>` to LOG and after it `D <file> <version>`
(unbuffered appends, which a SIGKILL cannot tear). Contents are a pure function of
(file, version), so a checker knows the old and the new content of every target.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys

FILES = ("top.txt", "a/one.txt", "a/b/two.txt", "c/three.md", "deep/er/still/four.txt")


def content(index: int, version: int) -> str:
    """The deterministic text of `FILES[index]` at `version`, between 0 and ~300 KB."""
    rng = random.Random(f"{index}:{version}")
    size = rng.choice((0, 10, 1000, 4096, 65_537, 300_000))
    seed = hashlib.sha256(f"{index}:{version}".encode()).hexdigest()
    body = (seed + "\u00e9\n") * (size // 66 + 1)
    return f"file {index} version {version}\n{body[:size]}"


def main(argv: list[str]) -> int:
    """Write forever (until killed); exit 3 if a write ever fails."""
    from singularity.storage import fsio
    from singularity.tools.confinement import Workspace
    from singularity.tools.files import write_file

    workspace, log_path, seed = argv[0], argv[1], int(argv[2])
    if "--failpoints" in argv:
        fsio.arm_failpoints(argv[argv.index("--failpoints") + 1])
    ws = Workspace(workspace, use_openat2=False if "--walk" in argv else None)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    rng = random.Random(seed)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    counter = 0
    while True:
        counter += 1
        index = rng.randrange(len(FILES))
        version = seed * 1_000_000 + counter
        os.write(log, f"S {index} {version}\n".encode())
        outcome = write_file(ws, {"path": FILES[index], "content": content(index, version)})
        if outcome.error_code is not None:
            sys.stderr.write(f"{outcome}\n")
            return 3
        os.write(log, f"D {index} {version}\n".encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
