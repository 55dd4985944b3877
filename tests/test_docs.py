"""The user docs keep up with the code: every option and every command is documented."""

from __future__ import annotations

import re
from pathlib import Path

import click

from singularity.cli.main import cli
from singularity.config import ALL_OPTIONS

DOCS = Path(__file__).parent.parent / "docs"


def test_every_option_is_in_the_configuration_reference() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = [
        option.flag
        for option in ALL_OPTIONS
        if f"`{option.flag}`" not in text or (option.env and f"`{option.env}`" not in text)
    ]
    assert missing == []


def test_every_command_is_in_the_cli_reference() -> None:
    text = (DOCS / "cli.md").read_text()
    names = cli.list_commands(click.Context(cli))
    missing = [name for name in names if f"`singularity {name}" not in text]
    assert missing == []


# `test_x.py`, `test_x.py::test_y[param]`, `::test_y` (in the file named last) or a bare
# `test_y` (ditto), each in backticks.
_NAMED_TEST = re.compile(r"`(?:(test_\w+\.py))?(?:(?:::)?(test_\w+)(?:\[[^\]`]*\])?)?`")


def test_every_test_the_threat_model_names_exists() -> None:
    tests = Path(__file__).parent
    text = (DOCS / "threat-model.md").read_text()
    missing: list[str] = []
    current: str | None = None
    for match in _NAMED_TEST.finditer(text):
        module, name = match.groups()
        if module is not None:
            current = module
            if not (tests / module).is_file():
                missing.append(module)
                continue
        if name is not None:
            assert current is not None, f"{match.group(0)} names no file"
            source = (tests / current).read_text()
            if not re.search(rf"^(?:async )?def {name}\(", source, re.MULTILINE):
                missing.append(f"{current}::{name}")
    assert missing == []
    assert current is not None  # the pattern found the names at all


def test_the_architecture_names_every_package_and_top_module() -> None:
    text = (DOCS / "architecture.md").read_text()
    source = Path(__file__).parent.parent / "src" / "singularity"
    names = [
        f"{path.name}/" if path.is_dir() else path.name
        for path in sorted(source.iterdir())
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.name != "__init__.py")
    ]
    missing = [name for name in names if name not in text]
    assert missing == []
