"""`singularity brama serve`: the embedded OpenAI-compatible model gateway (decision 7)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import click

from singularity.cli.listening import listen, port_option
from singularity.errors import ConfigurationError
from singularity.gateway.auth import Secret
from singularity.gateway_server.model_catalogue import DEFAULT_MODEL, MODELS
from singularity.gateway_server.model_files import (
    INSTALL_HINT,
    MissingExtra,
    default_model_dir,
    fetch,
)
from singularity.gateway_server.routes import GatewayConfig, Router, checked_local, load_config
from singularity.secrets import read_secret_file
from singularity.settings_check import is_loopback_host

log = logging.getLogger(__name__)


def _settings(
    config_file: str | None,
    queue_size: int | None,
    model: str | None,
    model_dir: str | None,
    prompt_cache_dir: str | None = None,
) -> GatewayConfig:
    config = load_config(config_file)
    if queue_size is not None:
        config = dataclasses.replace(config, queue_size=queue_size)
    local = config.local
    if model is not None:
        local = dataclasses.replace(local, model=model, model_path=None, model_id=None)
    if model_dir is not None:
        local = dataclasses.replace(local, model_dir=model_dir)
    if prompt_cache_dir is not None:
        local = dataclasses.replace(local, prompt_cache_dir=prompt_cache_dir)
    return dataclasses.replace(config, local=checked_local(local))


MODEL_CHOICE = click.Choice(list(MODELS))
MODEL_HELP = "The local model: " + "; ".join(
    f"{name}: {card.title}, {card.size / 1e6:,.0f} MB" for name, card in MODELS.items()
)


@click.group()
def brama() -> None:
    """The embedded model gateway."""


@brama.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@port_option(8081)
@click.option("--config", "config_file", default=None, help="TOML file of routes and limits.")
@click.option(
    "--secret-file",
    default=None,
    help="Brama HMAC secret (owner-only file); completions must then be signed.",
)
@click.option("--agent-id", default=None, help="Accept signed requests from this agent id only.")
@click.option(
    "--api-key-file",
    default=None,
    help="A key (owner-only file) that clients may send as `Authorization: Bearer`.",
)
@click.option(
    "--model", type=MODEL_CHOICE, default=None, help=MODEL_HELP + f" [default: {DEFAULT_MODEL}]."
)
@click.option(
    "--model-dir",
    default=None,
    help="Where fetched models are [default: ~/.cache/singularity/models].",
)
@click.option(
    "--prompt-cache-dir",
    default=None,
    help="Where evaluated prompts are kept across restarts; '' keeps none "
    "[default: ~/.cache/singularity/prompts].",
)
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
    api_key_file: str | None,
    model: str | None,
    model_dir: str | None,
    prompt_cache_dir: str | None,
    queue_size: int | None,
) -> None:
    """Serve GET health, GET v1/models and POST v1/chat/completions."""
    secret = Secret(read_secret_file(secret_file).value) if secret_file else None
    api_key = Secret(read_secret_file(api_key_file).value) if api_key_file else None
    if secret is None and api_key is None and not is_loopback_host(host):
        raise ConfigurationError(
            f"refusing to listen on {host} without --secret-file or --api-key-file: "
            "a gateway without authentication listens on loopback only"
        )
    config = _settings(config_file, queue_size, model, model_dir, prompt_cache_dir)
    router = Router(config)
    # Imported here so that the rest of the CLI works without the [local] extra.
    try:
        from singularity.gateway_server.server import run_gateway
    except ImportError as error:
        raise MissingExtra(f"the gateway needs {error.name}; {INSTALL_HINT}") from None
    run_gateway(router, listen(host, port), secret=secret, agent_id=agent_id, api_key=api_key)


@brama.command("fetch")
@click.option(
    "--model", type=MODEL_CHOICE, default=DEFAULT_MODEL, show_default=True, help=MODEL_HELP
)
@click.option(
    "--model-dir", default=None, help="Where to keep it [default: ~/.cache/singularity/models]."
)
def fetch_command(model: str, model_dir: str | None) -> None:
    """Download a local model's parts (hashes pinned), join and verify them, once per machine."""
    card = MODELS[model]
    directory = Path(model_dir).expanduser() if model_dir else default_model_dir()
    path = fetch(card, directory)
    click.echo(f"{card.title}: {path} ({card.size:,} bytes, sha256 {card.sha256}; {card.licence})")
