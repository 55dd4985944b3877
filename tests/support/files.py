"""What a directory holds, for tests that compare trees byte for byte."""

from __future__ import annotations

import os
from pathlib import Path


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) below `root`, by relative path."""
    found: dict[str, bytes | None] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(folder, name), root) + "/"] = None
        for name in files:
            found[os.path.relpath(os.path.join(folder, name), root)] = Path(
                folder, name
            ).read_bytes()
    return found
