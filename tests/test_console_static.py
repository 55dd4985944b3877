"""The console's vendored browser files: each is the npm package and version the lock pins,
with that package's licence, and the pages load nothing else from outside the console."""

from __future__ import annotations

import json
import re
from pathlib import Path

import singularity.console

STATIC = Path(singularity.console.__file__).parent / "static"
TEMPLATES = Path(singularity.console.__file__).parent / "templates"


def test_every_vendored_folder_is_a_locked_package_with_its_licence() -> None:
    lock = json.loads((STATIC / "vendor" / "package-lock.json").read_text())
    manifest = json.loads((STATIC / "vendor" / "package.json").read_text())
    locked = {
        name.removeprefix("node_modules/"): entry["version"]
        for name, entry in lock["packages"].items()
        if name
    }
    assert locked == manifest["dependencies"]
    folders = sorted(p.name for p in (STATIC / "vendor").iterdir() if p.is_dir())
    assert folders == sorted(f"{name}-{version}" for name, version in locked.items())
    for folder in folders:
        licence = (STATIC / "vendor" / folder / "LICENSE").read_text()
        assert "Permission to use, copy, modify, and/or distribute this software" in licence


def test_pages_load_scripts_only_from_the_console() -> None:
    sources = re.findall(r'<script[^>]*src="([^"]+)"', (TEMPLATES / "base.html").read_text())
    assert sources and all(src.startswith("/static/") for src in sources)
    for source in sources:
        assert (STATIC / source.removeprefix("/static/")).is_file()
    for template in TEMPLATES.glob("*.html"):
        text = template.read_text()
        assert "<script>" not in text and "hx-on" not in text, template.name
