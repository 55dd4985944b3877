"""The shape of the package: module size (and why a long one is long), one reader of the
environment, import direction, no import cycle, and the dependencies it imports declared."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent
SRC = ROOT / "src" / "singularity"
MAX_MODULE_LINES = 800
LONG_MODULE_LINES = 400
"""A module over this says why in docs/architecture.md's table of long modules."""
LONG_MODULES_TABLE = re.compile(r"^  \| `([^`]+\.py)` \| \d+ \|", re.MULTILINE)

# Lower layers must never import higher ones (architecture.md).
LAYERS = [
    {"errors", "config", "money", "jsoncodec", "timestamps", "secrets", "text", "version"}
    | {"state_place"},
    {"domain", "settings_check"},
    {"storage", "store", "tools", "gateway", "gateway_server", "skills", "most", "journal"}
    | {"sanctum", "mind"},
    {"runtime", "testing", "fleet"},
    {"cli", "console", "__main__"},
    {"__init__"},  # the public face (`singularity/__init__.py`): names the supported API
]


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _layer(top: str) -> int:
    for index, names in enumerate(LAYERS):
        if top in names:
            return index
    raise AssertionError(f"{top} is in no layer: add it to LAYERS")


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


def test_every_long_module_says_why() -> None:
    named = set(LONG_MODULES_TABLE.findall((ROOT / "docs" / "architecture.md").read_text()))
    long = {
        str(path.relative_to(SRC))
        for path in _modules()
        if len(path.read_text().splitlines()) > LONG_MODULE_LINES
    }
    assert {"unexplained": sorted(long - named), "not long": sorted(named - long)} == {
        "unexplained": [],
        "not long": [],
    }


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


def test_only_the_brama_command_imports_the_embedded_gateway() -> None:
    importers = [
        str(path.relative_to(SRC))
        for path in _modules()
        if _top(path) != "gateway_server"
        and "gateway_server" in _imported_tops(ast.parse(path.read_text()))
    ]
    assert importers == ["cli/brama.py"]


def test_nothing_imports_the_cli() -> None:
    offenders = [
        str(path.relative_to(SRC))
        for path in _modules()
        if _top(path) not in ("cli", "__main__")
        and "cli" in _imported_tops(ast.parse(path.read_text()))
    ]
    assert offenders == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports: at the top, in functions, for types."""
    paths = {_module_name(path): path for path in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    imported.add(full if full in paths else base)
        graph[name] = {module for module in imported if module in paths and module != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while (top := stack.pop()) != module:
                component.append(top)
            if component:
                found.append(sorted([module, *component]))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for module in sorted(graph):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def test_no_module_imports_itself_through_others() -> None:
    assert _cycles(_import_graph()) == []


# Inside `runtime/`, a part imports only lower parts, none beside it (architecture.md).
RUNTIME_LAYERS = [
    {"revealed", "window", "heap"},
    {"being"},
    {"ledger"},
    {"family"},
    {"mind_import"},
    {"loop", "talk"},
    {"inspect"},
]


def _runtime_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "runtime" else None


def _runtime_layer(part: str) -> int:
    for index, names in enumerate(RUNTIME_LAYERS):
        if part in names:
            return index
    raise AssertionError(f"runtime/{part} is in no layer: add it to RUNTIME_LAYERS")


def test_runtime_parts_import_down() -> None:
    upward = []
    for module, imported in sorted(_import_graph().items()):
        if (own := _runtime_part(module)) is None:
            continue
        for target in sorted(imported):
            part = _runtime_part(target)
            if part is not None and part != own and _runtime_layer(part) >= _runtime_layer(own):
                upward.append(f"{module} imports {target}")
    assert upward == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0] for requirement in requirements}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_library_imported_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _requirement_names(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared |= _requirement_names(extra)
    declared = {_normal(name) for name in declared}
    distributions = importlib.metadata.packages_distributions()
    undeclared = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "singularity":
                    continue
                owners = {_normal(owner) for owner in distributions.get(top, [top])}
                if not owners & declared:
                    undeclared.append(f"{path.relative_to(SRC)} imports {top}")
    assert sorted(set(undeclared)) == []
