"""A living being's import socket is at its path only once it listens (spec §15.5).

`import` and `talk` reach a living being through the socket as soon as they find its path;
a socket bound but not yet listening would refuse them. The service binds and listens
under another name, then renames the socket into place.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from singularity.runtime.mind_import.service import PENDING_SUFFIX, ImportService, socket_path
from singularity.testing.scripted_server import ScriptedServer
from tests.support.import_socket import ask
from tests.support.loop_http import boot, run

NOT_JSON = b"not json"
REFUSAL = {
    "ok": False,
    "error": "invalid local state import request: Expecting value: line 1 column 1 (char 0)",
}


def _serve_one_request(tmp_path: Path) -> object:
    """Start the service of a booted being, ask it once, stop it; its answer."""
    with ScriptedServer() as server:

        async def live() -> object:
            runtime = boot(tmp_path, server)
            service = ImportService(socket_path(str(tmp_path / "being")), runtime.apply_import)
            await service.start()
            try:
                assert os.stat(service.path).st_mode & 0o777 == 0o600
                assert not os.path.lexists(service.path + PENDING_SUFFIX)
                return await asyncio.to_thread(ask, service.path, NOT_JSON)
            finally:
                await service.stop()
                await runtime.shutdown()

        return run(live())


def test_the_socket_is_at_its_path_only_once_it_listens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = socket_path(str(tmp_path / "being"))
    seen_at_listen: list[bool] = []
    listen = socket.socket.listen

    def watched(self: socket.socket, *backlog: int) -> None:
        if self.family == socket.AF_UNIX:
            seen_at_listen.append(os.path.lexists(path))
        listen(self, *backlog)

    monkeypatch.setattr(socket.socket, "listen", watched)
    assert _serve_one_request(tmp_path) == REFUSAL
    assert seen_at_listen[0] is False, "a client finding the path could have been refused"


def test_a_pending_socket_a_killed_runtime_left_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "being").mkdir()
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(socket_path(str(tmp_path / "being")) + PENDING_SUFFIX)
    left.close()  # its file stays, as a kill between bind and rename leaves it
    assert _serve_one_request(tmp_path) == REFUSAL
