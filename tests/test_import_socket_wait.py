"""A running being applies an import once its cycle in progress ends, so `import` waits
for that by default, and `--timeout` bounds the wait with an error that names what
timed out and says the import may still be applied (spec §15.5)."""

from __future__ import annotations

import asyncio
import socket
import threading
from logging import ERROR
from pathlib import Path

import pytest

from singularity.errors import RuntimeFailure, StateError
from singularity.jsoncodec import compact
from singularity.runtime.loop.lifecycle import Runtime
from singularity.runtime.mind_import.document import ImportReport
from singularity.runtime.mind_import.service import ImportService, socket_path, submit
from singularity.testing.scripted_server import ScriptedServer
from tests.support.loop_http import boot, run
from tests.support.polling import wait_for_async

TEA = "The user prefers tea."
DOCUMENT = compact(
    {
        "schema_version": "singularity-mind-import-v1",
        "source": {"kind": "notes-export", "id": "laptop"},
        "memories": [{"id": "m1", "text": TEA}],
    }
).encode()


def _remembers_tea(runtime: Runtime) -> bool:
    return any(memory.text == TEA for memory in runtime.being.state.mind.memories)


async def _served(tmp_path: Path, runtime: Runtime, arrived: asyncio.Event) -> ImportService:
    """The being's import service, telling `arrived` when a request reaches the being."""

    async def importer(document: bytes) -> ImportReport:
        arrived.set()
        return await runtime.apply_import(document)

    service = ImportService(socket_path(str(tmp_path / "being")), importer)
    await service.start()
    return service


def test_an_import_waits_for_the_cycle_in_progress_by_default(tmp_path: Path) -> None:
    with ScriptedServer() as server:

        async def live() -> dict[str, object]:
            runtime = boot(tmp_path, server)
            arrived = asyncio.Event()
            service = await _served(tmp_path, runtime, arrived)
            try:
                async with runtime.cycle_lock:  # a cycle in progress, however long
                    client = asyncio.ensure_future(
                        asyncio.to_thread(submit, service.path, DOCUMENT)
                    )
                    await arrived.wait()
                    assert not client.done()
                return await client
            finally:
                await service.stop()
                await runtime.shutdown()

        report = run(live())
    assert (report["accepted"], report["imported"]) == (True, 1)


def test_an_import_timeout_names_what_timed_out_and_the_import_still_applies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with ScriptedServer() as server:

        async def live() -> str:
            runtime = boot(tmp_path, server)
            service = await _served(tmp_path, runtime, asyncio.Event())
            try:
                async with runtime.cycle_lock:
                    with pytest.raises(RuntimeFailure) as gave_up:
                        await asyncio.to_thread(submit, service.path, DOCUMENT, 2.0)
                    assert not _remembers_tea(runtime)
                await wait_for_async(lambda: _remembers_tea(runtime), "the late import")
                return str(gave_up.value)
            finally:
                await service.stop()
                await runtime.shutdown()

        error = run(live())
    assert error == (
        "runtime: the running being did not answer the import within 2 s "
        f"(at {socket_path(str(tmp_path / 'being'))}); it takes requests between cycles "
        "and may still apply it"
    )
    # The being answering a client that left is no error of the service.
    assert [record.getMessage() for record in caplog.records if record.levelno >= ERROR] == []


def test_a_being_that_closes_without_answering_is_named_as_such(tmp_path: Path) -> None:
    path = str(tmp_path / "state-import.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen()

        def close_unanswered() -> None:
            connection, _ = listener.accept()
            with connection:
                while connection.recv(65536):
                    pass

        closer = threading.Thread(target=close_unanswered)
        closer.start()
        try:
            with pytest.raises(StateError) as refused:
                submit(path, DOCUMENT)
        finally:
            closer.join()
    assert str(refused.value) == (
        f"state: local state import service at {path} closed the connection without "
        "answering the import (the being may have stopped)"
    )
