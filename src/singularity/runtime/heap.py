"""The heap of a long-lived being: what its boot loaded is kept out of the collector's
full passes.

CPython's cyclic collector walks every tracked object on a full (generation 2) pass. A
full being (1000 memories, a 400-message window, the catalogue, the imported libraries)
holds ~60,000 of them, and one such pass takes tens to hundreds of milliseconds
(bench/README.md): a pause that lands inside whichever model round happens to trigger it.
What boot loads lives as long as the being, so after boot it is frozen
(`gc.freeze`): later passes walk only what was made since. Frozen objects are still
freed by reference counting; only a cycle among them waits for `release`, which the
runtime's shutdown calls, so a process that boots and stops beings one after another
(a fleet worker, a test run) collects what they left as before.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Move every object alive now out of the collector's generations (`gc.freeze`)."""
    gc.freeze()


def release() -> None:
    """Put the frozen objects back into the oldest generation (`gc.unfreeze`)."""
    gc.unfreeze()
