"""The tracker's list comparison against its rule, written plainly with slices.

`_list_change` and `_aligned_change` (the usual step's way: nothing or one item cut,
the whole tail kept, items appended) answer as the rule does: none for a list with the same ends and the same or equal items between
(`==` in C, by identity first); else `dropped` is where the new list's first item is in the old one (by
identity, else by value, else past the end), `kept` the longest run after it whose items
are the same or equal, and the old list is left exactly as it was.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from singularity.jsoncodec import compact_utf8
from singularity.store.changes import Changes, ListChange, Tracker, _aligned_change, _list_change
from tests.support.stores import a_being, archive_overflow, live_a_step


def _same(first: Any, second: Any) -> bool:
    return first is second or first == second


def _rule(old: list[Any], new: list[Any]) -> ListChange | None:
    if (
        len(old) == len(new)
        and (not old or (old[0] is new[0] and old[-1] is new[-1]))
        and all(map(_same, old, new))
    ):
        return None  # unchanged: the same ends, the items between the same or equal
    if not new:
        dropped = len(old)
    else:
        found = [i for i, item in enumerate(old) if item is new[0]]
        equal = [i for i, item in enumerate(old) if item == new[0]]
        dropped = (found or equal or [len(old)])[0]
    kept = 0
    limit = min(len(old) - dropped, len(new))
    while kept < limit and _same(new[kept], old[dropped + kept]):
        kept += 1
    return ListChange(dropped, kept, new[kept:])


@st.composite
def steps(draw: st.DrawFn) -> tuple[list[Any], list[Any]]:
    """An old list of messages and the list a step made of it."""
    old = [{"n": n} for n in range(draw(st.integers(0, 8)))]
    new = old[draw(st.sampled_from([0, 0, 1, 1, 2, len(old)])) :]
    if new and draw(st.booleans()):
        where = draw(st.integers(0, len(new) - 1))
        new[where] = dict(new[where]) if draw(st.booleans()) else {"n": -1}
    if draw(st.booleans()):
        new = [dict(item) for item in new]  # equal copies
    new += [{"added": n} for n in range(draw(st.integers(0, 3)))]
    return old, new


@settings(max_examples=400)
@given(steps())
def test_every_list_change_is_the_rules(step: tuple[list[Any], list[Any]]) -> None:
    old, new = step
    before = list(old)
    assert _list_change(old, new) == _rule(before, new)
    assert len(old) == len(before) and all(a is b for a, b in zip(old, before, strict=True))


@settings(max_examples=400)
@given(steps())
def test_a_list_left_aligned_is_the_rules_and_puts_back(step: tuple[list[Any], list[Any]]) -> None:
    old, new = step
    before = list(old)
    if _list_change(old, new) is None:
        return  # an untouched list: `diff` asks no more of it
    aligned: dict[int, tuple[int, Any, int]] = {}
    change = _aligned_change(old, new, 3, aligned) if old and new else None
    if change is None:  # not the usual step: left as it was
        assert not aligned and len(old) == len(before)
        assert all(a is b for a, b in zip(old, before, strict=True))
        return
    assert change == _rule(before, new) and old == new
    dropped, head, added = aligned[3]
    assert head is before[0] and (dropped, added) == (change.dropped, len(change.added))
    del old[len(old) - added :]  # what `Tracker` does to put it back
    if dropped:
        old.insert(0, head)
    assert len(old) == len(before) and all(a is b for a, b in zip(old, before, strict=True))


def test_a_tracker_whose_diff_left_lists_aligned_diffs_and_takes_as_a_new_one_does() -> None:
    state = a_being()
    for index in range(12):
        live_a_step(state, index)
    tracker = Tracker()  # not archiving: the leaving message is encoded from the image
    tracker.reset(state)
    archive_overflow(state, keep=10)
    tracker.reset(state)
    for index in range(12, 40):
        window = list(state.conversation)
        if index % 2:
            live_a_step(state, index)  # two messages in, two out
        else:
            state.conversation.append({"role": "user", "content": f"m{index}"})  # one
        archive_overflow(state, keep=10)
        fresh = Tracker()
        first = tracker.diff(state)
        changes = tracker.diff(state)  # put back, then aligned again: what `take` is given
        assert changes == first
        if index % 3 == 0:  # the image as last committed
            leaving = changes.archived()
            assert leaving and tracker.dropped_encoded(leaving) == [
                compact_utf8(message) for message in window[:leaving]
            ]
        if index % 5 == 0:
            tracker.take(state, Changes(dict(changes.fields), dict(changes.lists)))  # not seen
        else:
            tracker.take(state, changes)
        assert not tracker.diff(state)
        fresh.reset(state)
        assert tracker._lists == fresh._lists
