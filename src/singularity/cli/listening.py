"""A listening socket, and its `--port` option, for the servers the CLI starts (the embedded
gateway, the console, the fleet's trial)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, TypeVar

import click

from singularity.errors import ConfigurationError

F = TypeVar("F", bound=Callable[..., Any])


def port_option(
    default: int, help_text: str = "Port to listen on (0: any free port)."
) -> Callable[[F], F]:
    """The `--port` option of a server the CLI starts (0: any free port)."""
    return click.option(
        "--port", type=click.IntRange(0, 65535), default=default, show_default=True, help=help_text
    )


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
