"""`singularity brama serve`: the embedded OpenAI-compatible model gateway (decision 7)."""

from __future__ import annotations

import dataclasses
import logging
import socket

import click

from singularity.errors import ConfigurationError
from singularity.gateway.auth import Secret
from singularity.gateway.client import is_loopback_url
from singularity.gateway.local_model import INSTALL_HINT, MissingExtra
from singularity.gateway.routes import GatewayConfig, Router, load_config
from singularity.secrets import read_secret_file

log = logging.getLogger(__name__)


def _is_loopback_host(host: str) -> bool:
    return is_loopback_url(f"http://[{host}]/" if ":" in host else f"http://{host}/")


def _listen(host: str, port: int) -> socket.socket:
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


def _settings(config_file: str | None, queue_size: int | None) -> GatewayConfig:
    config = load_config(config_file)
    if queue_size is not None:
        config = dataclasses.replace(config, queue_size=queue_size)
    return config


@click.group()
def brama() -> None:
    """The embedded model gateway."""


@brama.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8081,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
@click.option("--config", "config_file", default=None, help="TOML file of routes and limits.")
@click.option(
    "--secret-file",
    default=None,
    help="Brama HMAC secret (owner-only file); completions must then be signed.",
)
@click.option("--agent-id", default=None, help="Accept signed requests from this agent id only.")
@click.option(
    "--queue-size",
    type=click.IntRange(min=0),
    default=None,
    help="Completions that may wait for the local model before 429 [default: 4].",
)
def serve(
    host: str,
    port: int,
    config_file: str | None,
    secret_file: str | None,
    agent_id: str | None,
    queue_size: int | None,
) -> None:
    """Serve GET health, GET v1/models and POST v1/chat/completions."""
    secret = Secret(read_secret_file(secret_file).value) if secret_file else None
    if secret is None and not _is_loopback_host(host):
        raise ConfigurationError(
            f"refusing to listen on {host} without --secret-file: "
            "an unsigned gateway listens on loopback only"
        )
    config = _settings(config_file, queue_size)
    router = Router(config)
    # Imported here so that the rest of the CLI works without the [local] extra.
    try:
        from singularity.gateway.server import run_gateway
    except ImportError as error:
        raise MissingExtra(f"the gateway needs {error.name}; {INSTALL_HINT}") from None
    run_gateway(router, _listen(host, port), secret=secret, agent_id=agent_id)
