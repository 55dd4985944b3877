"""Work started in a thread at the session's start, so that it overlaps the rest of the suite.

The default tier's one request to the default model spends a minute of one core evaluating
a being's first prompt (the model runs one thread), while most of the suite waits on
processes, sockets and fsyncs. Started early, that minute is spent beside the other tests;
the test that needs the result waits for it and asserts on it as if it had run it itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Early(Generic[T]):
    """`work()` running in a daemon thread; `result()` waits for it and returns or raises."""

    def __init__(self, name: str, work: Callable[[], T]) -> None:
        self._work = work
        self._value: list[T] = []
        self._raised: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value.append(self._work())
        except BaseException as raised:  # handed to the test that awaits it, never dropped
            self._raised.append(raised)

    def wait(self) -> None:
        """Return once the work finished, whatever its outcome."""
        self._thread.join()

    def result(self) -> T:
        """The work's value once it finished; what it raised is raised here."""
        self._thread.join()
        if self._raised:
            raise self._raised[0]
        return self._value[0]
