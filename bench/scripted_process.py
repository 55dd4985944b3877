"""The scripted server in a process of its own, driven by the bench over a pipe.

    with ServerProcess() as server:
        server.add([{"text": "done"}])      # turns in the script-file form
        ... a side talks to server.url ...
        count, kib = server.served()        # completions answered since the last call

A real model server does not run inside the being's process: a `ScriptedServer` thread in
the bench's own process parses every request body under the same interpreter lock as the
side it answers, so a side with large requests (a full being's ~300 KiB) pays for the
server's work too, and the two threads convoy on the lock. Here the server runs in a child
process (`python -m bench.scripted_process`); the bench sends it one JSON line per command
on its stdin and reads one JSON line back on its stdout:

- `{"add": [turn, ...]}` appends turns (`Turn.from_json`) and answers `{"ok": true}`;
- `{"served": true}` answers `{"completions": n, "bytes": [size, ...], "paths": [...]}`
  for the completions received since the last such command, and forgets their bodies;
- end of input stops the server and the process.

The child first prints `{"url": "..."}`. It answers 500 `script exhausted` when a side
asks for more turns than it was given, so a side that makes an extra call is caught.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from singularity.testing.scripted_server import ScriptedServer, Turn


def serve(commands: IO[str], answers: IO[str]) -> None:
    """Play turns on a `ScriptedServer` as `commands` say until they end (the child's body)."""
    with ScriptedServer(default=None) as server:
        _answer(answers, {"url": server.url})
        for line in commands:
            command = json.loads(line)
            if "add" in command:
                server.add(*(Turn.from_json(entry) for entry in command["add"]))
                _answer(answers, {"ok": True})
            elif "served" in command:
                _answer(answers, _forget(server))
            else:
                _answer(answers, {"error": f"unknown command {line.strip()}"})
        if server.errors:
            raise RuntimeError(f"the scripted server failed: {server.errors!r}")


def _forget(server: ScriptedServer) -> dict[str, Any]:
    completions = server.completions
    with server._lock:  # no public way to forget requests; the server keeps every body
        server._requests.clear()
    return {
        "completions": len(completions),
        "bytes": [len(request.body) for request in completions],
        "paths": sorted({request.path for request in completions}),
    }


def _answer(answers: IO[str], document: dict[str, Any]) -> None:
    answers.write(json.dumps(document) + "\n")
    answers.flush()


class ServerProcess:
    """A child process serving the scripted server; a context manager."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> ServerProcess:
        """Start the child and wait for its URL."""
        root = str(Path(__file__).resolve().parent.parent)
        paths = [root, *sys.path[1:]]
        environ = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.scripted_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environ,
        )
        self.url = self._ask(None)["url"]
        return self

    def add(self, turns: list[dict[str, Any]]) -> None:
        """Append turns (script-file form) to the server's script."""
        self._ask({"add": turns})

    def served(self) -> tuple[int, float]:
        """Completions answered since the last call, and their mean size in KiB."""
        answer = self._ask({"served": True})
        sizes = answer["bytes"]
        return answer["completions"], statistics.fmean(sizes) / 1024 if sizes else 0.0

    def stop(self) -> None:
        """Close the child's input and wait for it to end; raises if it failed."""
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        code = process.wait(timeout=30)
        process.stdout.close()
        if code != 0:
            raise RuntimeError(f"the scripted server process ended with status {code}")

    def _ask(self, command: dict[str, Any] | None) -> dict[str, Any]:
        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            raise RuntimeError("the scripted server process is not running")
        if command is not None:
            process.stdin.write(json.dumps(command) + "\n")
            process.stdin.flush()
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the scripted server process ended ({process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.stop()
        elif self._process is not None:  # the bench failed: end the child, keep the error
            self._process.kill()
            self._process.communicate()
            self._process = None


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
