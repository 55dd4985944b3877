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
from singularity.domain.state import AgentState
from singularity.errors import ConfigurationError
from singularity.journal.keyring import being_fingerprint
from singularity.journal.opening import open_journal
from singularity.journal.records import EMBEDDER_CHOICES, JournalError
from singularity.journal.service import Journal, JournalConfig
from singularity.journal.tools import journal_tools
from singularity.storage.activity import Event
from singularity.timestamps import Clock, parse_timestamp
from singularity.tools.base import Toolset
from singularity.tools.extension import BeingHandle, CycleSummary, Extension
from singularity.tools.output_boundary import OutputBoundary

log = logging.getLogger(__name__)
PURGE_INTERVAL = timedelta(hours=1)
MOOD_WINDOW = timedelta(hours=24)
EMBED_PER_CYCLE = 32
WAITING_FOR_VECTORS = (
    "{count} journal entries have no {model} vector yet (an earlier embedder made theirs): "
    "{per_cycle} are embedded after each cycle, or all at once by `singularity journal "
    "embed`; until then recall finds them only when the query is part of their text"
)
RECOVERY_WARNINGS = {
    "key_lost": "the journal key is gone: its entries can never be read again; a fresh "
    "journal starts and the old file is set aside as {file}",
    "foreign": "the journal database belonged to another journal; a fresh one starts and "
    "the old file is set aside as {file}",
    "damaged": "the journal database was damaged: {kept} entries were kept, {lost} known "
    "lost; the damaged file is set aside as {file}",
}


def fingerprint_of(state: AgentState) -> str:
    """The fingerprint that binds a journal's keyring to this being."""
    return being_fingerprint(state.identity.model_dump(mode="json"), state.started_at)


def journal_config(settings: Settings, being: str) -> JournalConfig:
    """The journal's part of the settings, checked, for the being of that fingerprint."""
    if settings.journal_retention_days < 1:
        raise ConfigurationError("journal retention must be at least 1 day")
    if settings.journal_embedder not in EMBEDDER_CHOICES:
        raise ConfigurationError(f"journal embedder must be one of {', '.join(EMBEDDER_CHOICES)}")
    return JournalConfig(
        state_dir=settings.state_dir,
        being=being,
        url=settings.journal_url,
        key_file=settings.journal_key_file,
        retention_days=settings.journal_retention_days,
        keep_promoted=settings.journal_keep_promoted,
        embedder=settings.journal_embedder,
    )


class JournalExtension(Extension):
    """One being's private journal."""

    def __init__(
        self, being: BeingHandle, config: JournalConfig, clock: Clock, boundary: OutputBoundary
    ) -> None:
        self.being = being
        self.config = config
        self.clock = clock
        self._journal: Journal | None = None
        self._last_purge: datetime | None = None
        self._pulse_due = False
        self._mood: str | None = None
        self._mood_at: datetime | None = None
        self._tools = journal_tools(
            being, config.state_dir, self._open_for_tools, self.wrote, boundary, self._after_tool
        )
        if config.url and not config.url.startswith("sqlite:"):
            self.journal(create=True)

    def journal(self, *, create: bool) -> Journal | None:
        """The open journal; None when it does not exist and may not be created yet.

        A lost key or a foreign file starts a fresh journal (the old file set aside); what
        was done is journaled.
        """
        if self._journal is None:
            self._journal = open_journal(self.config, self.clock, create=create, recover=True)
        if self._journal is not None:
            self._record_recoveries(self._journal)
        return self._journal

    def _record_recoveries(self, journal: Journal) -> None:
        being = self.being
        notices = journal.store.notices
        while notices:
            being.journal(events.Warned(being.now(), being.state.cycle, notices.pop(0)))
        while journal.recoveries:
            done = journal.recoveries.pop(0)
            message = RECOVERY_WARNINGS[done.reason].format(
                file=done.set_aside, kept=done.kept, lost=len(done.lost)
            )
            log.warning("%s", message)
            being.journal(
                events.JournalRecovered(
                    being.now(),
                    being.state.cycle,
                    done.reason,
                    done.set_aside,
                    done.kept,
                    len(done.lost),
                    done.unreachable,
                )
            )

    def _open_for_tools(self) -> Journal:
        journal = self.journal(create=True)
        assert journal is not None
        return journal

    def _after_tool(self) -> None:
        """A tool may have salvaged a damaged file: journal it."""
        if self._journal is not None:
            self._record_recoveries(self._journal)

    def watch(self, event: Event) -> None:
        """Told every event the being journals: a Pulse starting makes the next purge due."""
        if events.kind_of(event) is events.PulseStarted:
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
            being.journal(events.JournalPurged(being.now(), being.state.cycle, count))
        return count

    def _purge_tolerantly(self) -> None:
        try:
            self.purge()
        except JournalError as error:
            being = self.being
            being.journal(events.Warned(being.now(), being.state.cycle, str(error)))

    async def at_boot(self) -> None:
        """Warn of the hashing fallback or a changed model file; salvage a damaged file;
        purge what expired; say how many entries wait for the current model's vectors."""
        from singularity.journal.embedders import check_embedder

        try:
            warning = check_embedder(self.config.embedder)
        except JournalError as error:
            warning = f"{error}; until then journal writes and recalls fail"
        if warning is not None:
            log.warning("%s", warning)
            self.being.journal(events.Warned(self.being.now(), self.being.state.cycle, warning))
        waiting, model = 0, ""
        try:
            journal = self.journal(create=False)
            if journal is not None:
                if journal.heal() is not None:
                    self._record_recoveries(journal)
                waiting, model = journal.pending_embeddings(), journal.embedder.name
        except JournalError as error:
            being = self.being
            being.journal(events.Warned(being.now(), being.state.cycle, str(error)))
        if waiting:
            notice = WAITING_FOR_VECTORS.format(
                count=waiting, model=model, per_cycle=EMBED_PER_CYCLE
            )
            log.warning("%s", notice)
            self.being.journal(events.Warned(self.being.now(), self.being.state.cycle, notice))
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
        self._record_recoveries(journal)

    async def at_stop(self) -> None:
        """Close the journal."""
        if self._journal is not None:
            self._journal.close()
            self._journal = None


def journal_extension(being: BeingHandle, settings: Settings) -> JournalExtension:
    """The journal part for a booted being, on the being's own clock."""
    config = journal_config(settings, fingerprint_of(being.state))
    boundary = OutputBoundary.from_settings(settings)
    part = JournalExtension(being, config, lambda: parse_timestamp(being.now()), boundary)
    listeners = getattr(being, "listeners", None)
    if isinstance(listeners, list):  # the runtime's being tells its events (a Pulse starting)
        listeners.append(part.watch)
    return part
