"""`singularity console`: the operator console over the beings under a root directory."""

from __future__ import annotations

import asyncio
import sys

import click

from singularity.cli.listening import listen, port_option
from singularity.errors import ConfigurationError

DEFAULT_PORT = 8700
STATE_URL_MESSAGE = (
    "--state-url: the PostgreSQL state store is not available yet; "
    "serve state directories with --root DIR"
)


@click.command(name="console")
@click.option(
    "--root", default=".", show_default=True, help="Serve every being under this directory."
)
@click.option("--state-url", default=None, help="A state store URL (not available yet).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@port_option(DEFAULT_PORT)
@click.option(
    "--token-file",
    default=None,
    help="File (0600) holding the token every request must carry; required beyond loopback.",
)
def console_command(
    root: str, state_url: str | None, host: str, port: int, token_file: str | None
) -> None:
    """Serve the operator console: the fleet, each being, chat and controls."""
    if state_url is not None:
        raise ConfigurationError(STATE_URL_MESSAGE)
    try:
        import uvicorn

        from singularity.console.app import create_app
        from singularity.console.security import Guard, read_token
        from singularity.console.source import DirectorySource
    except ImportError as error:
        raise ConfigurationError(
            f"the console needs the [console] extra (pip install 'singularity[console]'): {error}"
        ) from None
    token = read_token(token_file) if token_file is not None else None
    source = DirectorySource(root)
    guard = Guard(host, port, token)  # refuses beyond loopback without a token, before binding
    listener = listen(host, port)
    bound = listener.getsockname()[1]
    guard.port = bound
    app = create_app(source, guard)
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"console listening on http://{shown}:{bound}/", err=True)
    sys.stderr.flush()
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    try:
        asyncio.run(server.serve(sockets=[listener]))
    finally:
        listener.close()
