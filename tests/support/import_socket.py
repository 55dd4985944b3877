"""Raw requests to a living being's import socket, bytes in and the parsed answer out."""

from __future__ import annotations

import json
import socket
from typing import Any


def ask(path: str, request: bytes, timeout: float = 60.0) -> Any:
    """Send `request` as it is, close the sending side, and parse the whole answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout)
        client.connect(path)
        client.sendall(request)
        client.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := client.recv(65536):
            reply += chunk
    return json.loads(reply)
