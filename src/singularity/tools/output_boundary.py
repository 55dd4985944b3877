"""The output boundary a being runs with: `redact` (the default) or `strict` (decision 21).

    boundary = OutputBoundary.from_settings(settings)   # or OutputBoundary("redact", (root,))
    bounded = boundary.apply(outcome.content)      # any JSON value
    bounded = boundary.apply_text(entry_text)      # one text, e.g. a recalled entry
    if bounded.rejection is None:
        use(bounded.content, bounded.redactions)   # {"secret-like key": 1, ...}

`strict` is spec §10.4 exactly: anything a rule catches rejects the whole value.
`redact` rejects only on the size and depth limits (and values JSON cannot carry), and
otherwise replaces what may not cross, counting each replacement under its reason.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from singularity.config import Settings
from singularity.jsoncodec import compact
from singularity.tools.boundary import (
    MAX_OUTPUT_BYTES,
    BoundaryRejection,
    check_output,
    check_structure,
)
from singularity.tools.redact import Redactor

BoundaryMode = Literal["redact", "strict"]
MODES: Final[tuple[BoundaryMode, ...]] = ("redact", "strict")


@dataclass(frozen=True)
class Bounded:
    """What crosses the boundary: the content (None when rejected), or why nothing does."""

    content: Any
    rejection: str | None = None
    redactions: Mapping[str, int] = field(default_factory=dict)
    """How many values were replaced, by reason (redact mode only)."""

    @property
    def redacted(self) -> int:
        """How many values were replaced in all."""
        return sum(self.redactions.values())


@dataclass(frozen=True)
class OutputBoundary:
    """The boundary's mode and the workspace whose paths redact mode shows relative."""

    mode: BoundaryMode = "redact"
    workspace_roots: tuple[str, ...] = ()
    """Absolute workspace paths (as configured and canonical): paths inside are kept."""

    @classmethod
    def from_settings(cls, settings: Settings) -> OutputBoundary:
        """The boundary of `--output-boundary`, for the workspace as configured and canonical."""
        workspace = settings.workspace
        roots = (os.path.realpath(workspace), os.path.abspath(workspace))
        return cls(mode_of(settings.output_boundary), roots)

    def apply(self, content: Any) -> Bounded:
        """Bound one JSON value."""
        if self.mode == "strict":
            try:
                check_output(content)
            except BoundaryRejection as error:
                return Bounded(None, str(error))
            return Bounded(content)
        redactor = Redactor(self.workspace_roots)
        try:
            check_structure(content)
            redacted = redactor.redact(content)
            if len(compact(redacted).encode("utf-8")) > MAX_OUTPUT_BYTES:
                raise BoundaryRejection(f"output exceeds {MAX_OUTPUT_BYTES} bytes")
        except BoundaryRejection as error:
            return Bounded(None, str(error))
        return Bounded(redacted, None, dict(sorted(redactor.counts.items())))

    def apply_text(self, text: str) -> Bounded:
        """Bound one text, as a string value (its content is a `str` when it passes)."""
        return self.apply(text)


STRICT: Final = OutputBoundary("strict")


def mode_of(name: str) -> BoundaryMode:
    """The mode named by a setting (validated when the settings were resolved)."""
    for mode in MODES:
        if name == mode:
            return mode
    raise ValueError(f"unknown output boundary mode: {name}")


__all__ = ["MODES", "STRICT", "BoundaryMode", "Bounded", "OutputBoundary", "mode_of"]
