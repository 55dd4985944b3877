"""A booted being's heap is frozen out of the collector's full passes until its shutdown,
and frozen again between steps when what it kept since passes a bound."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import pytest

from singularity.runtime import heap
from singularity.runtime.loop.lifecycle import Runtime
from singularity.testing.scripted_server import ScriptedServer
from tests.support.loop_http import settings


def test_boot_freezes_what_it_loaded_and_shutdown_releases_it(tmp_path: Path) -> None:
    with ScriptedServer() as server:

        async def live() -> tuple[int, bool, int]:
            runtime = Runtime.boot(settings(tmp_path, server))
            frozen = gc.get_freeze_count()
            state_frozen = not any(runtime.being.state is o for o in gc.get_objects())
            await runtime.once()
            await runtime.shutdown()
            return frozen, state_frozen, gc.get_freeze_count()

        frozen, state_frozen, after = asyncio.run(live())
    assert frozen > 0
    assert state_frozen  # the loaded state is out of the generations the collector walks
    assert after == 0


class _Node:
    """A tracked object that can sit in a cycle and be watched through a weak reference."""

    def __init__(self) -> None:
        self.other: object = None


def _unfrozen() -> int:
    return len(gc.get_objects())  # the three generations; the frozen ones are not listed


def test_a_long_life_resettled_keeps_the_unfrozen_heap_bounded() -> None:
    bound = 2_000
    kept: list[object] = []
    heap.settle()
    try:
        peaks = []
        resettled = 0
        for _ in range(400):  # a life whose every step keeps 50 new tracked objects
            kept.extend([n] for n in range(50))
            peaks.append(_unfrozen())  # what a full pass at this step's end would walk
            resettled += heap.resettle(bound)
        assert resettled >= 5  # 20,000 kept objects against a bound of 2,000
        assert max(peaks) < bound + 50 + 500  # not 20,000: the last step as the first
        assert gc.get_freeze_count() >= len(kept)
    finally:
        heap.release()


def test_resettle_leaves_a_small_heap_alone() -> None:
    heap.settle()
    try:
        frozen = gc.get_freeze_count()
        assert not heap.resettle(bound=_unfrozen() + 10_000)
        assert gc.get_freeze_count() == frozen
    finally:
        heap.release()


def test_a_garbage_cycle_made_before_a_resettle_is_collected_not_frozen() -> None:
    heap.settle()
    try:
        first, second = _Node(), _Node()
        first.other, second.other = second, first
        watched = weakref.ref(first)
        del first, second  # a cycle only the collector frees
        assert watched() is not None
        assert heap.resettle(bound=0)
        assert watched() is None
    finally:
        heap.release()


def test_release_after_resettles_unfreezes_everything() -> None:
    heap.settle()
    kept = [_Node() for _ in range(100)]
    assert heap.resettle(bound=0)
    assert gc.get_freeze_count() > 0
    heap.release()
    assert gc.get_freeze_count() == 0
    assert any(kept[0] is o for o in gc.get_objects())


def test_the_loop_resettles_between_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bounds: list[int] = []
    resettle = heap.resettle

    def watched(bound: int = heap.BOUND) -> bool:
        bounds.append(bound)
        return resettle(0)  # every step over the bound: each one freezes again

    monkeypatch.setattr(heap, "resettle", watched)
    with ScriptedServer() as server:

        async def live() -> tuple[bool, int]:
            runtime = Runtime.boot(settings(tmp_path, server))
            await runtime.once()
            made = [_Node() for _ in range(10)]
            await runtime.once()
            made_frozen = not any(made[0] is o for o in gc.get_objects())
            await runtime.shutdown()
            return made_frozen, gc.get_freeze_count()

        made_frozen, after = asyncio.run(live())
    assert bounds == [heap.BOUND, heap.BOUND]
    assert made_frozen  # what was made after boot was frozen at the step's end
    assert after == 0


def test_a_being_whose_heap_another_shutdown_unfroze_is_frozen_again_at_its_next_step(
    tmp_path: Path,
) -> None:
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    with ScriptedServer() as server:

        async def live() -> tuple[int, int]:
            first = Runtime.boot(settings(tmp_path / "first", server))
            second = Runtime.boot(settings(tmp_path / "second", server))
            await first.once()
            await first.shutdown()  # gc.unfreeze has no owner: the second's heap too
            unfrozen = gc.get_freeze_count()
            await second.once()
            frozen = gc.get_freeze_count()
            await second.shutdown()
            return unfrozen, frozen

        unfrozen, frozen = asyncio.run(live())
    assert unfrozen == 0
    assert frozen > heap.BOUND  # the process's heap is over the bound: frozen again
    assert gc.get_freeze_count() == 0
