"""What a property test promises to cover, checked against what its examples reached.

A property test that never reaches the interesting states passes vacuously. Name the
situations up front, note the ones each example goes through, and assert at the end:

    def test_money_is_exact() -> None:
        reached = Reached("paid", "exhausted")

        @given(...)
        def one_life(...) -> None:
            ...
            reached.note("paid" if debited else "free")  # only promised names count

        one_life()
        reached.assert_all()
"""

from __future__ import annotations

import collections


class Reached:
    """The promised situations, and how many examples reached each."""

    def __init__(self, *promised: str) -> None:
        self.promised = frozenset(promised)
        self.counts: collections.Counter[str] = collections.Counter()

    def note(self, *situations: str) -> None:
        """Count the situations one example went through (unpromised names are ignored)."""
        self.counts.update(name for name in situations if name in self.promised)

    def assert_all(self) -> None:
        """Fail, naming them, when some promised situation was never reached."""
        missing = sorted(self.promised - set(self.counts))
        assert missing == [], f"never reached: {missing} (reached: {dict(self.counts)})"
