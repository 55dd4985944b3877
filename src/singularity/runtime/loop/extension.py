"""The extension hooks, defined with the tools so that built-in parts can use them."""

from __future__ import annotations

from singularity.tools.extension import BeingHandle, CycleSummary, Extension

__all__ = ["BeingHandle", "CycleSummary", "Extension"]
