"""Start `singularity` commands as forked processes of an interpreter that imported it once.

A crash test kills a parent being dozens of times; paying the interpreter's start-up and
imports (about a second here) for every life would make it slow. This process imports the
program, then for each request forks a process that runs the real command line
(`singularity.cli.main.main`) in its own working directory, with its output in files.

Protocol, one JSON object a line on stdin, one answer a line on stdout:
  {"start": [argv...], "cwd": dir, "env": {...}, "log": path}  ->  {"pid": N}
  {"wait": N}                                                   ->  {"status": code or -signal}
An argv that starts with `--worker` runs `support/children_worker.py` with the rest.
"""

from __future__ import annotations

import json
import os
import sys

import singularity.cli.main as cli_main
from tests.support import children_worker

for _command in cli_main.COMMANDS.values():  # every command's module, imported once here
    _command.load()


def _child(argv: list[str], cwd: str, env: dict[str, str], log: str) -> None:
    try:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log + ".out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        err = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        for source, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(source, target)
        if argv[:1] == ["--worker"]:
            sys.argv = ["children_worker", *argv[1:]]
            children_worker.main()
        else:
            sys.argv = ["singularity", *argv]
            cli_main.main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # report, never return into the zygote's loop
        import traceback

        traceback.print_exc()
        code = 70
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        if "start" in request:
            pid = os.fork()
            if pid == 0:
                _child(request["start"], request["cwd"], request["env"], request["log"])
            answer: dict[str, int] = {"pid": pid}
        else:
            _, status = os.waitpid(int(request["wait"]), 0)
            answer = {"status": os.waitstatus_to_exitcode(status)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
