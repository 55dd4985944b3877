"""The reads every sanctum backend derives from its `read_bytes`: a file as UTF-8 text, and
as text or None when it does not exist."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from singularity.sanctum.descriptors import MAX_READ_BYTES
from singularity.sanctum.names import IO, SanctumRefusal, unless_missing


class TextReads(ABC):
    """A backend's text reads, made of its byte reads."""

    @abstractmethod
    def read_bytes(self, parts: Sequence[str], limit: int = MAX_READ_BYTES) -> bytes:
        """Every byte of a file of at most `limit` bytes."""

    def read_text(self, parts: Sequence[str], limit: int = MAX_READ_BYTES) -> str:
        """A file as UTF-8 text."""
        try:
            return self.read_bytes(parts, limit).decode("utf-8")
        except UnicodeDecodeError:
            raise SanctumRefusal(IO, "file is not UTF-8 text") from None

    def read_optional(self, parts: Sequence[str], limit: int = MAX_READ_BYTES) -> str | None:
        """A file as text, or None when it does not exist."""
        return unless_missing(lambda: self.read_text(parts, limit))
