"""A light start: `singularity --help` lists every command without importing any of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from singularity.cli.main import COMMANDS, cli

# What `--help` may load: the command line's own modules and what they need.
LIGHT = {
    "singularity",
    "singularity.cli",
    "singularity.cli.lazy",
    "singularity.cli.logs",
    "singularity.cli.main",
    "singularity.errors",
    "singularity.jsoncodec",
    "singularity.money",
    "singularity.text",
    "singularity.version",
}
HEAVY = ("pydantic", "rich", "httpx", "mcp", "cryptography", "numpy", "jsonschema", "anyio")

PROBE = """
import json, sys
report, sys.argv = sys.argv[1], ["singularity", *sys.argv[2:]]
from singularity.cli.main import main
try:
    main()
except SystemExit:
    pass
with open(report, "w") as file:
    json.dump(sorted(sys.modules), file)
"""


def _help(group: click.Group, width: int) -> str:
    context = click.Context(
        group, info_name="singularity", terminal_width=width, **group.context_settings
    )
    return group.get_help(context)


def _loaded_modules(tmp_path: Path, *argv: str) -> list[str]:
    report = tmp_path / "modules.json"
    subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *argv],
        capture_output=True,
        check=True,
        timeout=120,
    )
    modules: list[str] = json.loads(report.read_text())
    return modules


@pytest.mark.parametrize("width", [60, 80, 132])
def test_the_help_lists_each_command_with_its_own_summary(width: int) -> None:
    eager = click.Group(
        name="singularity",
        help=cli.help,
        params=cli.params,
        context_settings=cli.context_settings,
    )
    for name, lazy in COMMANDS.items():
        eager.add_command(lazy.load(), name)
    assert _help(cli, width) == _help(eager, width)


def test_each_command_is_registered_under_its_own_name() -> None:
    assert {name: lazy.load().name for name, lazy in COMMANDS.items()} == {
        name: name for name in COMMANDS
    }


@pytest.mark.parametrize("argv", [["--help"], ["--version"], []])
def test_the_help_imports_no_command(tmp_path: Path, argv: list[str]) -> None:
    modules = _loaded_modules(tmp_path, *argv)
    ours = {name for name in modules if name.split(".")[0] == "singularity"}
    assert sorted(ours - LIGHT) == []
    assert [name for name in modules if name.split(".")[0] in HEAVY] == []


def test_a_command_loads_only_when_it_runs(tmp_path: Path) -> None:
    modules = _loaded_modules(tmp_path, "say", "--help")
    assert "singularity.cli.talk" in modules
    assert "singularity.cli.live" not in modules
