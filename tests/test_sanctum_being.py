"""A being on the scripted gateway keeps its sanctum across a restart, and an identity
change reaches the very next model request."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from singularity.config import resolve
from singularity.errors import ConfigurationError
from singularity.runtime.family.children import child_environment
from singularity.runtime.inspect.verify import verify_state_dir
from singularity.runtime.loop.lifecycle import Runtime
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.commands import SINGULARITY, clean_environment
from tests.support.loop_http import boot, run, settings
from tests.support.sanctum import being_args, wake_lines

NEW_PERSONA = "# Persona\n\n- Name: Sage\n- Vibe: dry wit, exact numbers\n"


def once(root: Path, server: ScriptedServer, *extra: str) -> dict[str, Any]:
    result = subprocess.run(
        [str(SINGULARITY), "once", *being_args(root, server.url, *extra)],
        env=clean_environment(),
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode()
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def system_of(server: ScriptedServer, index: int) -> str:
    content: str = server.completions[index].json["messages"][0]["content"]
    return content


def tool_results(server: ScriptedServer, index: int) -> list[dict[str, Any]]:
    messages = server.completions[index].json["messages"]
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


def test_the_sanctum_outlives_the_process_and_identity_changes_reach_the_next_request(
    tmp_path: Path,
) -> None:
    first = [
        Turn.tool_call(
            "singularity_sanctum_write",
            {"path": "memory/topics/pricing.md", "content": "# Pricing\n\nPRICE-IS-42 USD.\n"},
        ),
        Turn.tool_call("singularity_sanctum_write", {"path": "PERSONA.md", "content": NEW_PERSONA}),
        Turn.text("first life done"),
    ]
    with ScriptedServer(first) as server:
        report = once(tmp_path, server)
        assert report["status"] == "completed"
        before, after = system_of(server, 1), system_of(server, 2)
    assert "\n\nSanctum:\nYour sanctum: " in before
    assert "Vibe: dry wit" not in before and "Vibe: dry wit" in after
    assert "===== PERSONA.md =====\n" + NEW_PERSONA.rstrip() + "\n\n===== CREED.md" in after
    assert "memory/topics/ (1 files)" in after
    assert "PRICE-IS-42" not in after  # the map, never the body

    second = [
        Turn.tool_call("singularity_sanctum_read", {"path": "memory/topics/pricing.md"}),
        Turn.text("second life done"),
    ]
    with ScriptedServer(second) as server:
        report = once(tmp_path, server, "--resume")
        assert report["cycle"] == 2
        woken = system_of(server, 0)
        read = tool_results(server, 1)[-1]
    assert "Vibe: dry wit" in woken and "memory/sessions/ (1 files)" in woken
    assert read["status"] == "success"
    assert read["content"]["content"] == "# Pricing\n\nPRICE-IS-42 USD.\n"

    state_dir = tmp_path / "being"
    assert verify_state_dir(str(state_dir)) == []
    # Both cycles' notes, in the day's one file of runtime notes.
    assert "memory/sessions/ (1 files)" in wake_lines(state_dir / "sanctum")
    [notes] = (state_dir / "sanctum" / "memory" / "sessions").iterdir()
    assert "\n## Cycle 1 (" in notes.read_text() and "\n## Cycle 2 (" in notes.read_text()


def test_the_sanctum_section_comes_after_the_minds_sections(tmp_path: Path) -> None:
    script = [
        Turn.tool_call("singularity_self_add_rule", {"rule": "RULE-ONE"}),
        Turn.tool_call("singularity_memory_remember", {"kind": "note", "text": "MEMORY-ONE"}),
        Turn.text("done"),
    ]

    async def live() -> str:
        async with ScriptedServer(script) as server:
            runtime = boot(tmp_path, server)
            try:
                await runtime.once()
            finally:
                await runtime.shutdown()
            return system_of(server, 2)

    system = run(live())
    rules = system.index("Self-imposed rules:\n- RULE-ONE")
    memories = system.index("Recent persistent memories:\n- note: MEMORY-ONE")
    sanctum = system.index("\n\nSanctum:\n")
    assert rules < sanctum < memories  # the newest memories last, for the cached prefix


def test_a_child_never_inherits_its_parents_sanctum(tmp_path: Path) -> None:
    settings = resolve({"sanctum_dir": str(tmp_path / "shared")}, environ={})
    environment = child_environment(
        {"SINGULARITY_SANCTUM_DIR": str(tmp_path / "shared"), "PATH": "/bin"},
        settings,
        name="kid",
        ticker="KID",
        specialty="x",
        state_dir=str(tmp_path / "kid"),
        secret_files={},
    )
    assert "SINGULARITY_SANCTUM_DIR" not in environment
    assert environment["SINGULARITY_STATE_DIR"] == str(tmp_path / "kid")


def test_a_sanctum_inside_the_workspace_is_refused_before_anything_is_touched(
    tmp_path: Path,
) -> None:
    with ScriptedServer() as server:
        config = settings(tmp_path, server, sanctum_dir=str(tmp_path / "ws" / "sanctum"))
        with pytest.raises(ConfigurationError, match="sanctum and workspace must not contain"):
            Runtime.boot(config)
        bad = settings(tmp_path, server, pulse_frequency="often")
        with pytest.raises(ConfigurationError, match="pulse: not a frequency"):
            Runtime.boot(bad)
    assert not (tmp_path / "being").exists()
    assert not (tmp_path / "ws" / "sanctum").exists()
