"""The sanctum's section follows the room the mind leaves it: a room that changes reuses the
cached section only when composing afresh would give the very same bytes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from singularity.sanctum.extension import MIN_ROOM, SanctumCore
from singularity.sanctum.fitting import json_size
from tests.support.sanctum import FakeHost, fake_core


class Rooms:
    """A core whose room is set by hand, counting its compositions."""

    def __init__(self, core: SanctumCore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.core, self.room, self.built = core, MIN_ROOM, 0
        compose = core._compose

        def counting(room: int) -> tuple[str, bool]:
            self.built += 1
            return compose(room)

        monkeypatch.setattr(core, "room", lambda: self.room)
        monkeypatch.setattr(core, "_compose", counting)

    def section(self, room: int) -> str:
        self.room = room
        return self.core.prompt_section()

    def fresh(self, host: FakeHost) -> str:
        """The section a core that never composed one gives in the same room."""
        other = SanctumCore(host, self.core.config)
        other.open()
        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(other, "room", lambda: self.room)
                return other.prompt_section()
        finally:
            other.close()


def grown(root: Path, persona: int, pending: int) -> None:
    """Pad PERSONA.md and pending.md so the wake takes about as many bytes more."""
    lines = "".join(f'- a line of the persona, number {n}, with a "quote"\n' for n in range(999))
    with (root / "PERSONA.md").open("a") as file:
        file.write(lines[:persona])
    (root / "memory" / "pending.md").write_text("- a pending item, zażółć\n" * (pending // 25))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    persona=st.integers(0, 12_000),
    pending=st.integers(0, 6_000),
    data=st.data(),
)
def test_a_section_after_a_room_change_is_the_one_composed_afresh(
    monkeypatch: pytest.MonkeyPatch, persona: int, pending: int, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        core, host = fake_core(Path(tmp))
        core.open()
        grown(Path(tmp) / "state" / "sanctum", persona, pending)
        core.invalidate()
        rooms = Rooms(core, monkeypatch)
        size = json_size(rooms.section(64 * 1024))
        edges = st.sampled_from([max(MIN_ROOM, size + step) for step in (-2, -1, 0, 1)])
        near = st.one_of(edges, st.integers(max(MIN_ROOM, size - 3000), size + 3000))
        for room in data.draw(st.lists(st.one_of(near, st.integers(MIN_ROOM, 64 * 1024)))):
            assert rooms.section(room) == rooms.fresh(host)
        core.close()


def test_a_growing_mind_reuses_the_whole_section_until_it_no_longer_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    core, host = fake_core(tmp_path)
    core.open()
    rooms = Rooms(core, monkeypatch)
    whole = rooms.section(64 * 1024)
    size = json_size(whole)
    for room in (60_000, 30_000, size + 1, size):  # the room shrinks, the wake still fits
        assert rooms.section(room) is whole
    assert rooms.built == 1
    cut = rooms.section(size - 1)  # no longer: composed again, and cut
    assert rooms.built == 2 and cut != whole and json_size(cut) <= size - 1
    assert cut == rooms.fresh(host)
    assert rooms.section(size - 1) is cut  # the same room reuses a cut section
    assert rooms.section(size - 2) == rooms.fresh(host)  # another room does not
    assert rooms.built == 3
    assert rooms.section(size) == whole  # room again: the whole wake, composed anew
    assert rooms.built == 4
    core.invalidate()  # a watched input changed: composed again whatever the room
    assert rooms.section(size) == whole and rooms.built == 5
    core.close()
