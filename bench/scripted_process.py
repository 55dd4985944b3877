"""The scripted server in a process of its own, driven by the bench over a pipe.

    with ServerProcess() as server:
        server.add([{"text": "done"}])      # turns in the script-file form
        ... a side talks to server.url ...
        served = server.served()            # completions answered since the last call

A real model server does not run inside the being's process: a `ScriptedServer` thread in
the bench's own process parses every request body under the same interpreter lock as the
side it answers, so a side with large requests (a full being's ~300 KiB) pays for the
server's work too, and the two threads convoy on the lock. Here the server runs in a child
process (`python -m bench.scripted_process`); the bench sends it one JSON line per command
on its stdin and reads one JSON line back on its stdout:

- `{"add": [turn, ...]}` appends turns (`Turn.from_json`) and answers `{"ok": true}`;
- `{"served": true}` answers `{"completions": n, "bytes": [size, ...], "seconds": [...]}`
  for the completions received since the last such command (each one's body size, and the
  time the server spent on it from its body's arrival to its answer's send: parsing,
  checking and answering), and forgets their bodies;
- end of input stops the server and the process.

The child first prints `{"url": "..."}`. It answers 500 `script exhausted` when a side
asks for more turns than it was given, so a side that makes an extra call is caught.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from singularity.testing.scripted_server import RecordedRequest, ScriptedServer, Turn, _Handler

TIMED_WAIT_SECS = 600.0
"""How long `served` waits for the handlers of answered requests to record their time."""


class _TimedServer(ScriptedServer):
    """The scripted server, timing each request from its body's arrival to its answer."""

    def __init__(self) -> None:
        super().__init__(default=None)
        self.seconds: dict[int, float] = {}
        """By the `id` of each recorded request (held in the request list until forgotten)."""
        self.timed = threading.Condition()
        """Guards `seconds`; notified as each request's time is recorded, which is after its
        answer was sent: a side may ask what was served before the handler got there."""
        self._current = threading.local()

    def _record(self, handler: _Handler, body: bytes) -> RecordedRequest:
        request = super()._record(handler, body)
        self._current.request = request
        return request

    def _serve(self, handler: _Handler, body: bytes) -> None:
        started = time.perf_counter()
        try:
            super()._serve(handler, body)
        finally:  # a failed answer is timed too, or `served` would wait for it
            spent = time.perf_counter() - started
            request = self._current.request
            if _completion(request):  # only these are forgotten with their time
                with self.timed:
                    self.seconds[id(request)] = spent
                    self.timed.notify_all()


def serve(commands: IO[str], answers: IO[str]) -> None:
    """Play turns on a `ScriptedServer` as `commands` say until they end (the child's body)."""
    with _TimedServer() as server:
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


def _completion(request: RecordedRequest) -> bool:
    return request.path.endswith("v1/chat/completions")


def _forget(server: _TimedServer) -> dict[str, Any]:
    with server._lock:  # no public way to forget requests; the server keeps every body
        requests = list(server._requests)
        server._requests.clear()
    chosen = [request for request in requests if _completion(request)]
    keys = [id(request) for request in chosen]
    with server.timed:
        if not server.timed.wait_for(
            lambda: all(key in server.seconds for key in keys), timeout=TIMED_WAIT_SECS
        ):
            raise RuntimeError(f"completions answered but not timed after {TIMED_WAIT_SECS} s")
        seconds = {key: server.seconds.pop(key) for key in keys}
    return {
        "completions": len(chosen),
        "bytes": [len(request.body) for request in chosen],
        "seconds": [seconds[id(request)] for request in chosen],
    }


def _answer(answers: IO[str], document: dict[str, Any]) -> None:
    answers.write(json.dumps(document) + "\n")
    answers.flush()


@dataclass(frozen=True)
class Served:
    """The completions a server answered: each one's body size and the server's seconds."""

    sizes: list[int]
    seconds: list[float]

    @property
    def count(self) -> int:
        """How many completions."""
        return len(self.sizes)

    @property
    def mean_kib(self) -> float:
        """Their mean body size in KiB (0 without any)."""
        return sum(self.sizes) / len(self.sizes) / 1024 if self.sizes else 0.0


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

    def served(self) -> Served:
        """The completions answered since the last call, in order."""
        answer = self._ask({"served": True})
        return Served(answer["bytes"], answer["seconds"])

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
