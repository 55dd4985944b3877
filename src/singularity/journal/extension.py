"""The journal as a part of a being: its tools, a mood line, purges and quiet maintenance.

The SQLite journal is created on the first write (a being that never writes has no key
and no database); a PostgreSQL journal is opened at boot so a bad URL fails early. The
purge runs at boot, at most hourly at cycle boundaries, before every Pulse, and from the
CLI. After a cycle a few rows that lack a vector of the current model are embedded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from singularity.config import Settings
from singularity.domain import events
from singularity.errors import ConfigurationError
from singularity.journal.records import EMBEDDER_CHOICES, JournalError
from singularity.journal.service import Journal, JournalConfig, open_journal
from singularity.journal.tools import journal_tools
from singularity.storage.activity import Event
from singularity.timestamps import Clock, parse_timestamp
from singularity.tools.base import Toolset
from singularity.tools.extension import BeingHandle, CycleSummary, Extension

log = logging.getLogger(__name__)
PURGE_INTERVAL = timedelta(hours=1)
MOOD_WINDOW = timedelta(hours=24)
EMBED_PER_CYCLE = 32


def journal_config(settings: Settings) -> JournalConfig:
    """The journal's part of the settings, checked."""
    if settings.journal_retention_days < 1:
        raise ConfigurationError("journal retention must be at least 1 day")
    if settings.journal_embedder not in EMBEDDER_CHOICES:
        raise ConfigurationError(f"journal embedder must be one of {', '.join(EMBEDDER_CHOICES)}")
    return JournalConfig(
        state_dir=settings.state_dir,
        url=settings.journal_url,
        key_file=settings.journal_key_file,
        retention_days=settings.journal_retention_days,
        keep_promoted=settings.journal_keep_promoted,
        embedder=settings.journal_embedder,
    )


class JournalExtension(Extension):
    """One being's private journal."""

    def __init__(self, being: BeingHandle, config: JournalConfig, clock: Clock) -> None:
        self.being = being
        self.config = config
        self.clock = clock
        self._journal: Journal | None = None
        self._last_purge: datetime | None = None
        self._pulse_due = False
        self._mood: str | None = None
        self._mood_at: datetime | None = None
        self._tools = journal_tools(being, config.state_dir, self._open_for_tools, self.wrote)
        if config.url and not config.url.startswith("sqlite:"):
            self.journal(create=True)

    def journal(self, *, create: bool) -> Journal | None:
        """The open journal; None when it does not exist and may not be created yet."""
        if self._journal is None:
            self._journal = open_journal(self.config, self.clock, create=create)
        return self._journal

    def _open_for_tools(self) -> Journal:
        journal = self.journal(create=True)
        assert journal is not None
        return journal

    def watch(self, event: Event) -> None:
        """Told every event the being journals: a Pulse starting makes the next purge due."""
        if event.get("type") == "pulse_started":
            self._pulse_due = True

    def wrote(self) -> None:
        """A write happened: the mood line is read again next round."""
        self._mood_at = None

    def toolsets(self) -> Sequence[Toolset]:
        """Write, recall, promote, and the public reasonlog append."""
        return [self._tools]

    def prompt_section(self) -> str:
        """`Current mood: <tag>` when an entry of the last 24 hours carries a mood."""
        now = self.clock()
        if self._mood_at is None or now - self._mood_at > timedelta(minutes=5):
            journal = self._journal
            try:
                self._mood = journal.latest_mood(MOOD_WINDOW) if journal else None
            except JournalError:
                self._mood = None
            self._mood_at = now
        return f"\n\nCurrent mood: {self._mood}" if self._mood else ""

    def purge(self) -> int:
        """Purge now and journal the count (the text of purged rows was never anywhere else)."""
        journal = self.journal(create=False)
        self._last_purge = self.clock()
        if journal is None:
            return 0
        count = journal.purge()
        if count:
            being = self.being
            being.journal(events.journal_purged(being.now(), being.state.cycle, count))
        return count

    def _purge_tolerantly(self) -> None:
        try:
            self.purge()
        except JournalError as error:
            being = self.being
            being.journal(events.warning(being.now(), being.state.cycle, str(error)))

    async def at_boot(self) -> None:
        """Purge what expired while the being was away."""
        self._purge_tolerantly()

    async def before_cycle(self) -> None:
        """Purge before a Pulse, or when the last purge is an hour old."""
        last = self._last_purge
        if self._pulse_due or last is None or abs(self.clock() - last) >= PURGE_INTERVAL:
            self._pulse_due = False
            self._purge_tolerantly()

    async def after_cycle(self, report: CycleSummary) -> None:
        """Embed a few rows that lack a vector of the current model."""
        journal = self._journal
        if journal is None:
            return
        try:
            journal.embed_pending(EMBED_PER_CYCLE)
        except JournalError as error:
            log.warning("journal maintenance failed: %s", error)

    async def at_stop(self) -> None:
        """Close the journal."""
        if self._journal is not None:
            self._journal.close()
            self._journal = None


def journal_extension(being: BeingHandle, settings: Settings) -> JournalExtension:
    """The journal part for a booted being, on the being's own clock."""
    part = JournalExtension(being, journal_config(settings), lambda: parse_timestamp(being.now()))
    listeners = getattr(being, "listeners", None)
    if isinstance(listeners, list):  # the runtime's being tells its events (a Pulse starting)
        listeners.append(part.watch)
    return part
