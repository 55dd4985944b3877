"""A listening socket for the servers the CLI starts (the embedded gateway, the console)."""

from __future__ import annotations

import socket

from singularity.errors import ConfigurationError


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port` and listening (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise ConfigurationError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    sock.listen(128)
    return sock
