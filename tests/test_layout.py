"""The shape of the package: module size, one reader of the environment, import direction."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parent.parent / "src" / "singularity"
MAX_MODULE_LINES = 800

# Lower layers must never import higher ones (architecture.md).
LAYERS = [
    {"errors", "config", "money", "jsoncodec", "timestamps", "secrets", "text"},
    {"domain", "settings_check"},
    {"storage", "tools", "gateway", "skills", "most", "journal", "sanctum", "mind"},
    {"runtime", "testing"},
    {"cli", "__main__"},
]


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _layer(top: str) -> int:
    for index, names in enumerate(LAYERS):
        if top in names:
            return index
    return 0  # package root files such as __init__


def _top(path: Path) -> str:
    relative = path.relative_to(SRC)
    return relative.parts[0].removesuffix(".py")


def _imported_tops(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("singularity.")
        ):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("singularity."):
                    found.add(alias.name.split(".")[1])
    return found


def test_no_module_is_too_long() -> None:
    long = [
        f"{path.relative_to(SRC)} ({count})"
        for path in _modules()
        if (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert long == []


def test_only_config_reads_the_environment() -> None:
    readers = []
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("environ", "getenv")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ):
                readers.append(str(path.relative_to(SRC)))
    assert sorted(set(readers)) == ["config.py"]


def test_imports_point_down_the_layers() -> None:
    upward = []
    for path in _modules():
        top = _top(path)
        own = _layer(top)
        for imported in _imported_tops(ast.parse(path.read_text())):
            if imported != top and _layer(imported) > own:
                upward.append(f"{path.relative_to(SRC)} imports {imported}")
    assert upward == []


def test_nothing_imports_the_cli() -> None:
    offenders = [
        str(path.relative_to(SRC))
        for path in _modules()
        if _top(path) not in ("cli", "__main__")
        and "cli" in _imported_tops(ast.parse(path.read_text()))
    ]
    assert offenders == []
