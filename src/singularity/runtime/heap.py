"""The heap of a long-lived being: what its boot loaded, and what it has kept since, is
kept out of the collector's full passes.

CPython's cyclic collector walks every tracked object on a full (generation 2) pass. A
full being (1000 memories, a 400-message window, the catalogue, the imported libraries)
holds ~60,000 of them, and one such pass takes tens to hundreds of milliseconds
(bench/README.md): a pause that lands inside whichever model round happens to trigger it.
What boot loads lives as long as the being, so after boot it is frozen
(`gc.freeze`): later passes walk only what was made since. What the being makes and keeps
after boot (memories, messages, records) reaches the oldest generation in turn, and
would make every full pass longer as the life goes on; so between steps, when more than
`BOUND` tracked objects are unfrozen, `resettle` collects the garbage
among the unfrozen objects (a cycle of garbage is not frozen) and freezes what is left.
The unfrozen heap a full pass walks is then bounded whatever the being's age, and the one
pass over it that `resettle` makes lands between steps, never inside a model round.

Frozen objects are still freed by reference counting; only a cycle among them waits for
`release`, which the runtime's shutdown calls, so a process that boots and stops beings
one after another (a fleet worker, a test run) collects what they left as before. In a
process living several beings, one's shutdown unfreezes the others' heaps too
(`gc.unfreeze` has no owner), as it always did; but now their next `resettle` finds
them over the bound and freezes them again.
"""

from __future__ import annotations

import gc

BOUND = 10_000
"""Unfrozen tracked objects past which `resettle` collects and freezes again: a full pass
over them costs a few milliseconds at most (~0.3-0.4 us an object for a full being's on
the bench machine), and counting them between steps ~50 us at most."""


def settle() -> None:
    """Move every object alive now out of the collector's generations (`gc.freeze`)."""
    gc.freeze()


def resettle(bound: int = BOUND) -> bool:
    """Between steps: when more than `bound` tracked objects are unfrozen, collect the
    garbage among them and freeze the rest; whether it did."""
    if len(gc.get_objects()) <= bound:  # the three generations, not the frozen
        return False
    gc.collect()
    gc.freeze()
    return True


def release() -> None:
    """Put the frozen objects back into the oldest generation (`gc.unfreeze`)."""
    gc.unfreeze()
