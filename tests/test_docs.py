"""The user docs keep up with the code: every option and every command is documented."""

from __future__ import annotations

from pathlib import Path

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
    missing = [name for name in cli.commands if f"`singularity {name}" not in text]
    assert missing == []
