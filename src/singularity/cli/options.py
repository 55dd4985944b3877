"""Click options generated from the option table, so flags, variables and file keys agree."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from singularity.config import (
    ALL_OPTIONS,
    STATE_OPTIONS,
    STORE_OPTIONS,
    Option,
    Settings,
    resolve,
)
from singularity.errors import ConfigurationError

F = TypeVar("F", bound=Callable[..., Any])


def _click_option(option: Option) -> Callable[[F], F]:
    env = f" [env: {option.env}]" if option.env else ""
    default = f" [default: {option.default}]" if option.default not in (None, "") else ""
    help_text = f"{option.help}{env}{default}"
    flags = (option.flag, *option.aliases)
    if option.kind == "bool":
        return click.option(*flags, option.name, is_flag=True, default=None, help=help_text)
    return click.option(*flags, option.name, default=None, help=help_text)


def config_option(function: F) -> F:
    """The `--config FILE` option."""
    return click.option(
        "--config",
        "config_file",
        default=None,
        help="TOML config file [env: SINGULARITY_CONFIG] [default: ./singularity.toml if present]",
    )(function)


def with_options(options: Iterable[Option]) -> Callable[[F], F]:
    """Decorate a command with a click option for each option."""

    def decorate(function: F) -> F:
        for option in reversed(tuple(options)):
            function = _click_option(option)(function)
        return config_option(function)

    return decorate


def wait_options(timeout_help: str) -> Callable[[F], F]:
    """`--wait` for the reply of the cycle that reads a message, and its `--timeout`."""

    def decorate(function: F) -> F:
        timeout = click.option(
            "--timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help=timeout_help,
        )
        wait = click.option(
            "--wait", is_flag=True, help="Wait for the cycle that reads it; print the reply."
        )
        return wait(timeout(function))

    return decorate


runtime_options = with_options(ALL_OPTIONS)
state_options = with_options(STATE_OPTIONS)
AGENT_ID = tuple(option for option in ALL_OPTIONS if option.name == "agent_id")
store_options = with_options(STATE_OPTIONS + STORE_OPTIONS + AGENT_ID)
"""`--state-dir`, `--state-url` and `--agent-id`: a being wherever it lives."""


def settings_from(params: dict[str, Any], *, on_postgres: bool = False) -> Settings:
    """Resolve settings from a command's parameters (unknown parameters are ignored).

    A command that cannot reach a being in a PostgreSQL state store yet (`on_postgres`
    false) refuses one named by `--state-url` or `SINGULARITY_STATE_URL`, rather than
    read or write the local state directory instead.
    """
    config_file = params.pop("config_file", None)
    settings = resolve(params, config_file=config_file)
    if settings.state_url is not None and not on_postgres:
        context = click.get_current_context(silent=True)
        command = context.command_path if context is not None else "this command"
        raise ConfigurationError(
            f"`{command}` does not work on a being in a PostgreSQL state store yet "
            "(--state-url, SINGULARITY_STATE_URL)"
        )
    return settings
