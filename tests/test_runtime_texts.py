"""Every text the runtime itself writes into a tool result passes the boundary unchanged.

Contract (decision 21): in both modes, `strict` and `redact`, the runtime's own messages
cross the output boundary exactly as written: no rejection, no marker, no rewrite. The
texts are enumerated from the source, so a new message is checked the day it is
written: every string, f-string (placeholders filled) or named constant given as the
message of a tool outcome (`Outcome.failed`, `Outcome.indeterminate`, a `"message"`
member), of the exceptions that become outcomes (`ToolArgumentError`, `SanctumRefusal`,
the journal's errors, `McpError`, `MostError`, `BramaError`), and the fixed contents of
the runtime's own tool messages. The texts computed at run time come from a few
functions, each checked over all its inputs here: OS errors (every errno), the UTF-8
decoder's message, the boundary's own withheld message and markers.
"""

from __future__ import annotations

import ast
import errno
import importlib
import json
import os
from pathlib import Path

import pytest

from singularity.runtime.loop.tool_call import CANCELLED_CONTENT, INTERRUPTED_CONTENT
from singularity.secrets import os_error_text
from singularity.tools.base import Outcome
from singularity.tools.boundary import MAX_DEPTH, MAX_OUTPUT_BYTES
from singularity.tools.catalogue import PRIVATE_PLACEHOLDER, tool_message, withheld_message
from singularity.tools.confinement import Workspace
from singularity.tools.files import read_file
from singularity.tools.output_boundary import STRICT, OutputBoundary
from singularity.tools.redact import MARKERS

SOURCE = Path(__file__).parent.parent / "src" / "singularity"
REDACT = OutputBoundary("redact")
OUTCOME_CALLS = {"failed": 1, "indeterminate": 1}  # Outcome.<name>(code, message)
MESSAGE_CLASSES = {
    "ToolArgumentError": 0,
    "SanctumRefusal": 1,
    "JournalError": 0,
    "CapReached": 0,
    "ModelMismatch": 0,
    "McpError": 0,
    "MostError": 0,
    "BramaError": 0,
    "FileNotFoundError": 0,
}
FILLER = "value"


def _render(expression: ast.expr, module: str) -> str | None:
    """The text of a message expression, placeholders filled; None when computed."""
    if isinstance(expression, ast.Constant) and isinstance(expression.value, str):
        return expression.value
    if isinstance(expression, ast.JoinedStr):
        parts = []
        for part in expression.values:
            if isinstance(part, ast.Constant):
                parts.append(str(part.value))
            else:
                parts.append(FILLER)
        return "".join(parts)
    if isinstance(expression, ast.Name):
        value = getattr(importlib.import_module(module), expression.id, None)
        return value if isinstance(value, str) else None
    if isinstance(expression, ast.BinOp) and isinstance(expression.op, ast.Add):
        left, right = _render(expression.left, module), _render(expression.right, module)
        return None if left is None or right is None else left + right
    return None


def _message_expression(node: ast.AST) -> ast.expr | None:
    if isinstance(node, ast.Call):
        function = node.func
        position = None
        if (
            isinstance(function, ast.Attribute)
            and isinstance(function.value, ast.Name)
            and function.value.id == "Outcome"
        ):
            position = OUTCOME_CALLS.get(function.attr)
        elif isinstance(function, ast.Name):
            position = MESSAGE_CLASSES.get(function.id)
        if position is not None and len(node.args) > position:
            return node.args[position]
        return None
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and key.value == "message":
                return value
    return None


def source_texts() -> list[tuple[str, str]]:
    """(where, text) for every message the source spells out."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        name = ".".join(("singularity", *path.relative_to(SOURCE).with_suffix("").parts))
        module = name.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            expression = _message_expression(node)
            if expression is None:
                continue
            text = _render(expression, module)
            if text is not None:
                found.append((f"{name}:{node.lineno}", text))
    return found


SOURCE_TEXTS = source_texts()


def passes_unchanged(text: str) -> bool:
    """Whether a text crosses both modes as it is, alone and as an outcome's message."""
    for value in (text, {"message": text}):
        if STRICT.apply(value).rejection is not None:
            return False
        bounded = REDACT.apply(value)
        if bounded.rejection is not None or bounded.content != value or bounded.redactions:
            return False
    return True


def test_the_source_spells_out_many_messages() -> None:
    # A floor, so that a broken scan cannot pass by finding nothing.
    assert len(SOURCE_TEXTS) > 100
    found = {text for _, text in SOURCE_TEXTS}
    assert "path leaves the workspace" in found
    assert "tool is not in the current catalog" in found
    assert f"{FILLER} request deadline exceeded: {FILLER}" in found


def test_every_message_the_source_spells_out_passes_both_modes_unchanged() -> None:
    failing = [(where, text) for where, text in SOURCE_TEXTS if not passes_unchanged(text)]
    assert failing == []


@pytest.mark.parametrize("number", sorted(errno.errorcode))
def test_every_os_error_passes_both_modes_unchanged(number: int) -> None:
    text = os_error_text(OSError(number, os.strerror(number)))
    assert text == f"{os.strerror(number)} (os error {number})"
    assert passes_unchanged(text)


def test_os_errors_from_the_file_tools_are_not_python_reprs(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    (tmp_path / "dir").mkdir()
    with Workspace(tmp_path) as workspace:
        outcomes = {
            path: read_file(workspace, {"path": path})
            for path in ("missing.txt", "file/below", "bad.txt", "dir")
        }
    messages = {path: outcome.content["message"] for path, outcome in outcomes.items()}
    assert messages == {
        "missing.txt": "No such file or directory (os error 2)",
        "file/below": "Not a directory (os error 20)",
        "bad.txt": "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
        "dir": "path is not a bounded regular file",
    }
    for path, outcome in outcomes.items():
        assert passes_unchanged(messages[path])
        for boundary in (STRICT, REDACT):
            built = tool_message("c", "singularity_file_read", outcome, boundary)
            assert json.loads(built.message["content"])["content"] == outcome.content


@pytest.mark.parametrize("content", [CANCELLED_CONTENT, INTERRUPTED_CONTENT])
def test_the_runtimes_fixed_tool_messages_pass_both_modes(content: str) -> None:
    inner = json.loads(content)["content"]
    assert passes_unchanged(inner["message"])


def test_the_private_placeholder_passes_both_modes() -> None:
    assert passes_unchanged(PRIVATE_PLACEHOLDER)
    outcome = Outcome.success(PRIVATE_PLACEHOLDER)
    for boundary in (STRICT, REDACT):
        built = tool_message("c", "singularity_journal_write", outcome, boundary)
        assert built.rejection is None


@pytest.mark.parametrize(
    "reason",
    [
        f"output exceeds {MAX_OUTPUT_BYTES} bytes",
        f"nesting exceeds depth {MAX_DEPTH}",
        "number is not finite",
        "string holds a lone surrogate",
    ],
)
@pytest.mark.parametrize("status", ["success", "failed", "indeterminate"])
def test_the_withheld_message_passes_both_modes(reason: str, status: str) -> None:
    assert passes_unchanged(withheld_message(reason, status))


@pytest.mark.parametrize("marker", MARKERS)
def test_the_markers_pass_both_modes(marker: str) -> None:
    assert passes_unchanged(marker)
