"""A command group that imports a command's module only when that command runs.

`singularity --help` lists every command with its summary; importing every command's
module for that would load the runtime, pydantic, rich and the gateway. Each command is
named here by where it lives and by its summary (the first paragraph of its docstring),
and `tests/test_cli_start.py` checks that the summaries listed are the commands' own.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True)
class LazyCommand:
    """Where a command lives (`module:attribute`) and the summary `--help` shows for it."""

    target: str
    summary: str

    def load(self) -> click.Command:
        """Import the command's module and return the command."""
        module_name, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


class LazyGroup(click.Group):
    """A group whose commands are imported when they are looked up, not when it is built."""

    def __init__(self, *args: Any, lazy: dict[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.add_command(self.lazy[cmd_name].load(), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and their summaries, as click writes them, with nothing imported."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, self._short_help(ctx, name, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _short_help(self, ctx: click.Context, name: str, limit: int) -> str:
        if name in self.lazy and name not in self.commands:
            # A command of the summary alone, shortened by click's own rule.
            return click.Command(name, help=self.lazy[name].summary).get_short_help_str(limit)
        command = self.get_command(ctx, name)
        return command.get_short_help_str(limit) if command is not None else ""
