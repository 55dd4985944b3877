"""The local import service of a running being (spec §15.5).

While `run` is active, a Unix socket `state-import.sock` (0600) in the state directory
accepts one mind-import request per connection. Requests are applied between cycles by
the owning process, with the same merge, save and journal as an offline import.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import os
import socket
import stat
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from singularity.domain.operator import OperatorRequest, parse_request
from singularity.errors import RuntimeFailure, SingularityError, StateError
from singularity.jsoncodec import compact, compact_utf8, loads_strict
from singularity.runtime.mind_import.document import ImportReport

SOCKET_NAME = "state-import.sock"
MAX_REQUEST_BYTES = 24 * 1024 * 1024
MAX_RESPONSE_BYTES = 1024 * 1024
Importer = Callable[[bytes], Awaitable[ImportReport]]
OperatorHandler = Callable[[OperatorRequest], dict[str, Any]]
OPERATOR_OPERATION = "operator_request"


def socket_path(state_dir: str) -> str:
    """Where a running being's import socket lives."""
    return os.path.join(state_dir, SOCKET_NAME)


MAX_SOCKET_PATH = 100
PENDING_SUFFIX = ".new"
"""The socket is bound and made to listen under this suffix, then renamed into place."""
LISTEN_BACKLOG = 100


@contextlib.contextmanager
def reachable(path: str) -> Iterator[str]:
    """A path to the socket short enough for AF_UNIX, however deep the state directory is."""
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        yield path
        return
    # Deep state directories (grandchildren) exceed the 108-byte sun_path limit; the
    # directory's descriptor under /proc/self/fd names the same place in a few bytes.
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{dir_fd}/{os.path.basename(path)}"
    finally:
        os.close(dir_fd)


def _answers(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        with reachable(path) as address:
            probe.connect(address)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def prepare_socket_path(path: str) -> None:
    """Refuse a non-socket at the path or a live service; remove a stale socket."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise StateError(f"local state import path is not a socket: {path}")
    if _answers(path):
        raise StateError("another Singularity runtime already owns the local state import service")
    os.unlink(path)


def _listening_at(path: str) -> socket.socket:
    """A Unix socket (0600) bound at `path` and listening; a socket a killed runtime left
    there is replaced (the caller holds the being's lock)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)
    try:
        with reachable(path) as address:
            listener.bind(address)
        os.chmod(path, 0o600)
        listener.listen(LISTEN_BACKLOG)
    except BaseException:
        listener.close()
        raise
    finally:
        os.umask(previous)
    return listener


def _remaining(client: socket.socket, deadline: float | None) -> socket.socket:
    """`client`, its timeout set to what is left until `deadline` (TimeoutError if none)."""
    if deadline is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        client.settimeout(left)
    return client


class _TooLarge(Exception):
    """A request longer than the limit."""


async def _read_all(reader: asyncio.StreamReader, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := await reader.read(65536):
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _load(data: bytes) -> Any:
    try:
        return loads_strict(data)
    except ValueError as error:  # not JSON, not UTF-8, or nested too deeply
        raise StateError(f"invalid local state import request: {error}") from None


def decode_request(data: bytes) -> bytes:
    """The raw import document carried by a request, or StateError."""
    request = _load(data)
    if (
        not isinstance(request, dict)
        or request.get("version") != 1
        or request.get("operation") != "mind_import"
        or not isinstance(request.get("document_base64"), str)
    ):
        raise StateError("invalid local state import request: unsupported version or operation")
    try:
        return base64.b64decode(request["document_base64"], validate=True)
    except (binascii.Error, ValueError) as error:
        raise StateError(f"invalid local state import request: {error}") from None


class ImportService:
    """The socket server; `importer` applies a document and returns its report."""

    def __init__(
        self, path: str, importer: Importer, operator: OperatorHandler | None = None
    ) -> None:
        self.path = path
        self._importer = importer
        self._operator = operator
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Serve on the socket (0600). It appears at its path only once it listens: a
        client that finds the path is queued until served, never refused."""
        prepare_socket_path(self.path)
        listener = _listening_at(self.path + PENDING_SUFFIX)
        try:
            os.rename(self.path + PENDING_SUFFIX, self.path)
            self._server = await asyncio.start_unix_server(self._serve, sock=listener)
        except BaseException:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path + PENDING_SUFFIX)
            raise

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reply: dict[str, Any]
        try:
            data = await _read_all(reader, MAX_REQUEST_BYTES)
            reply = {"ok": True, "result": await self._answer(data)}
        except _TooLarge:
            reply = {"ok": False, "error": "state import request is too large"}
        except SingularityError as error:
            reply = {"ok": False, "error": error.message}
        try:
            # A client that gave up (its --timeout) has left: the request stands, unanswered.
            with contextlib.suppress(ConnectionError):
                writer.write(compact_utf8(reply))  # an error may quote a lone surrogate it met
                await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, data: bytes) -> dict[str, Any]:
        request = _load(data)
        if (
            self._operator is not None
            and isinstance(request, dict)
            and request.get("version") == 1
            and request.get("operation") == OPERATOR_OPERATION
        ):
            return self._operator(parse_request(request.get("request")))
        report = await self._importer(decode_request(data))
        return report.to_json()

    async def stop(self) -> None:
        """Stop serving and remove the socket."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def submit(path: str, document: bytes, timeout: float | None = None) -> dict[str, Any]:
    """Send a document to a running being; returns its report (client side of §15.5).

    The being applies it between cycles, so the answer waits for the cycle in progress:
    by default as long as that takes (the socket closes if the being's process ends), or
    at most `timeout` seconds, then RuntimeFailure.
    """
    message = {
        "version": 1,
        "operation": "mind_import",
        "document_base64": base64.b64encode(document).decode("ascii"),
    }
    return exchange(path, message, timeout, "the import")


def submit_operator(path: str, request: OperatorRequest, timeout: float = 30.0) -> dict[str, Any]:
    """Hand an operator request to a running being; its acknowledgement."""
    message = {"version": 1, "operation": OPERATOR_OPERATION, "request": request.to_json()}
    return exchange(path, message, timeout, "the operator request")


def exchange(
    path: str, message: dict[str, Any], timeout: float | None, what: str
) -> dict[str, Any]:
    """One request and its reply over the local socket, all within `timeout` seconds
    (None: no limit); `what` names the request in the error when it runs out."""
    request = compact(message).encode("utf-8")
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            # The limit is on the whole exchange, not on each call: a being answers once.
            _remaining(client, deadline)
            with reachable(path) as address:
                client.connect(address)
            _remaining(client, deadline)
            client.sendall(request)
            client.shutdown(socket.SHUT_WR)
            chunks: list[bytes] = []
            size = 0
            while chunk := _remaining(client, deadline).recv(65536):
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise StateError("invalid local state import response: too large")
                chunks.append(chunk)
    except TimeoutError:
        raise RuntimeFailure(
            f"the running being did not answer {what} within {timeout:g} s "
            f"(at {path}); it takes requests between cycles and may still apply it"
        ) from None
    except OSError as error:
        raise StateError(f"local state import service at {path} is unavailable: {error}") from None
    if not chunks:
        raise StateError(
            f"local state import service at {path} closed the connection without answering "
            f"{what} (the being may have stopped)"
        )
    try:
        reply = loads_strict(b"".join(chunks))
    except ValueError as error:
        raise StateError(f"invalid local state import response: {error}") from None
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise StateError("invalid local state import response: missing ok")
    if not reply["ok"]:
        raise StateError(str(reply.get("error", "import failed")))
    result = reply.get("result")
    if not isinstance(result, dict):
        raise StateError("invalid local state import response: missing result")
    return result
