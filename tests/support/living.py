"""Living beings as real `singularity` subprocesses, for tests that talk to them from outside."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.commands import SINGULARITY, clean_environment
from tests.support.polling import wait_for

WAIT_SECS = 180.0


class Process:
    """One `singularity` subprocess with its stderr in a file."""

    def __init__(
        self, args: Sequence[str], cwd: Path, log: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.log_path = log
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            [str(SINGULARITY), *args],
            cwd=cwd,
            env=clean_environment(**(env or {})),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )

    def stderr(self) -> str:
        """What it wrote to stderr so far."""
        return self.log_path.read_text("utf-8", errors="replace")

    def wait(self, timeout: float = WAIT_SECS) -> int:
        """Wait for it to exit; its exit code."""
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()

    def stop(self) -> None:
        """End it if it still runs (SIGKILL), and reap it."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()


def run_command(cwd: Path, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """`singularity ARGS` run to its end in `cwd`, with no option variable inherited."""
    return subprocess.run(
        [str(SINGULARITY), *args],
        cwd=cwd,
        env=clean_environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def terminate(process: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; the process is reaped either way."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_until(condition: Callable[[], bool], what: str, process: Process | None = None) -> None:
    """`wait_for` the condition; fail at once, with its stderr, if the process exits first."""

    def ready() -> bool:
        if condition():
            return True
        if process is not None and process.process.poll() is not None:
            pytest.fail(
                f"the process exited ({process.process.returncode}) before {what}:\n"
                + process.stderr()
            )
        return False

    try:
        wait_for(ready, what, timeout=WAIT_SECS, interval=0.05)
    except AssertionError as error:
        pytest.fail(f"{error}:\n" + (process.stderr() if process is not None else ""))
