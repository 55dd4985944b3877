"""`singularity console`: the operator console over the beings under a root directory or in
a PostgreSQL state store."""

from __future__ import annotations

import asyncio
import sys

import click
from click.core import ParameterSource

from singularity.cli.listening import listen, port_option
from singularity.errors import ConfigurationError
from singularity.state_place import StorePlace

DEFAULT_PORT = 8700


@click.command(name="console")
@click.option(
    "--root", default=".", show_default=True, help="Serve every being under this directory."
)
@click.option(
    "--state-url",
    default=None,
    help="Serve every being of this PostgreSQL state store (postgresql://…) instead; "
    "a directory path or file:// URL is served as --root.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@port_option(DEFAULT_PORT)
@click.option(
    "--token-file",
    default=None,
    help="File (0600) holding the token every request must carry; required beyond loopback.",
)
@click.pass_context
def console_command(
    context: click.Context,
    root: str,
    state_url: str | None,
    host: str,
    port: int,
    token_file: str | None,
) -> None:
    """Serve the operator console: the fleet, each being, chat and controls."""
    place = _place(context, root, state_url)
    try:
        import uvicorn

        from singularity.console.app import create_app
        from singularity.console.security import Guard, read_token
        from singularity.console.source import BeingSource, DirectorySource
    except ImportError as error:
        raise ConfigurationError(
            f"the console needs the [console] extra (pip install 'singularity[console]'): {error}"
        ) from None
    token = read_token(token_file) if token_file is not None else None
    guard = Guard(host, port, token)  # refuses beyond loopback without a token, before binding
    source: BeingSource
    if place.is_postgres:
        from singularity.console.postgres_source import PostgresSource

        source = PostgresSource(place.location)
    else:
        source = DirectorySource(place.location)
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


def _place(context: click.Context, root: str, state_url: str | None) -> StorePlace:
    """What the console serves: `--state-url` when given (then never with `--root`)."""
    if state_url is None:
        return StorePlace("directory", root)
    if context.get_parameter_source("root") is not ParameterSource.DEFAULT:
        raise ConfigurationError("--root and --state-url name two places to serve; give one")
    return StorePlace.parse(state_url)
