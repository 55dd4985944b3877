"""A real being's cycle composes the sanctum's section once: the solvency check builds it
and the first request reuses it, unless the sanctum changed in between."""

from __future__ import annotations

from pathlib import Path

import pytest

from singularity.mind.prompt import MEMORIES_HEADER
from singularity.runtime.being import LiveBeing
from singularity.runtime.loop.extension import Extension
from singularity.runtime.loop.lifecycle import Runtime
from singularity.runtime.loop.sanctum import sanctum_extension
from singularity.sanctum.extension import SECTION_HEADER, SanctumCore
from singularity.testing.scripted_server import ScriptedServer, Turn
from tests.support.loop_http import run, settings

EDITED_PERSONA = "# Persona\n\n- Name: Wren\n- Vibe: EDITED-BETWEEN-CHECK-AND-REQUEST\n"


class EditsPersona(Extension):
    """A person's edit of PERSONA.md landing after the check, before the first request."""

    def __init__(self, being: LiveBeing, root: Path, on_cycle: int) -> None:
        self.being, self.root, self.on_cycle = being, root, on_cycle

    async def before_cycle(self) -> None:
        if self.being.state.cycle + 1 == self.on_cycle:
            (self.root / "PERSONA.md").write_text(EDITED_PERSONA)


def count_compositions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The cycle counter at each composition of the section (the real one still runs)."""
    built: list[int] = []
    compose = SanctumCore._compose

    def counting(core: SanctumCore, room: int) -> tuple[str, bool]:
        built.append(core.host.state.cycle)
        return compose(core, room)

    monkeypatch.setattr(SanctumCore, "_compose", counting)
    return built


def live(
    tmp_path: Path, server: ScriptedServer, cycles: int, edit_on: int, **flags: object
) -> None:
    chosen = settings(tmp_path, server, **flags)
    root = Path(chosen.state_dir) / "sanctum"

    def parts(being: LiveBeing) -> list[Extension]:
        return [sanctum_extension(being, chosen), EditsPersona(being, root, edit_on)]

    async def go() -> None:
        runtime = Runtime.boot(chosen, extensions=parts)
        try:
            for _ in range(cycles):
                if runtime.being.state.cycle == 1:
                    # A person adds a topic file between cycles: a file no stamp watches.
                    (root / "memory" / "topics").mkdir(exist_ok=True)
                    (root / "memory" / "topics" / "by-hand.md").write_text("# By hand\n")
                await runtime.live_one()
        finally:
            await runtime.shutdown()

    run(go())


def system_of(server: ScriptedServer, index: int) -> str:
    content: str = server.completions[index].json["messages"][0]["content"]
    return content


def test_each_cycle_composes_the_sanctum_section_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = count_compositions(monkeypatch)
    script = [Turn.text(f"cycle {number} done") for number in (1, 2, 3)]
    with ScriptedServer(script) as server:
        live(tmp_path, server, cycles=3, edit_on=0)
        systems = [system_of(server, index) for index in range(3)]
    # One composition before each cycle's check (the counter not yet advanced), reused by
    # the cycle's first request.
    assert built == [0, 1, 2]
    assert "memory/topics/" not in systems[0]
    assert "memory/topics/ (1 files)" in systems[1]  # the cycle boundary saw the new file
    assert "memory/sessions/ (1 files)" in systems[1]  # cycle 1's note, written after it


def test_an_identity_edit_after_the_check_reaches_the_first_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = count_compositions(monkeypatch)
    script = [Turn.text("cycle 1 done"), Turn.text("cycle 2 done")]
    with ScriptedServer(script) as server:
        live(tmp_path, server, cycles=2, edit_on=2)
        first, second = system_of(server, 0), system_of(server, 1)
    assert "EDITED-BETWEEN-CHECK-AND-REQUEST" not in first
    assert "===== PERSONA.md =====\n" + EDITED_PERSONA.rstrip() + "\n\n===== CREED.md" in second
    # Cycle 2's check composed the section, the edit after it made the request compose again.
    assert built == [0, 1, 2]


def test_a_growing_minds_rounds_reuse_the_section_while_the_wake_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = count_compositions(monkeypatch)
    rooms: list[int] = []
    room = SanctumCore.room

    def measured(core: SanctumCore) -> int:
        rooms.append(room(core))
        return rooms[-1]

    monkeypatch.setattr(SanctumCore, "room", measured)
    remember = [
        Turn.tool_call("singularity_memory_remember", {"kind": "fact", "text": f"fact {n} " * 40})
        for n in (1, 2, 3)
    ]
    with ScriptedServer([*remember, Turn.text("cycle 1 done")]) as server:
        live(tmp_path, server, cycles=1, edit_on=0, context_tokens="30000")
        systems = [system_of(server, index) for index in range(4)]
    # The sanctum (and the other parts' steady sections) stand before the memories.
    sections = [system.split(SECTION_HEADER)[1].split(MEMORIES_HEADER)[0] for system in systems]
    # Each remembered fact took room from the sanctum, but the whole wake fit every time:
    # the check's composition served all four rounds, byte for byte.
    assert len(set(rooms)) == 4 and rooms == sorted(rooms, reverse=True)
    assert built == [0]
    assert len(set(sections)) == 1
