"""The runtime's own secrets never travel (decision 32): which they are, and the log filter.

The secrets are the Brama HMAC secret and API key, the Most token (read from their files
or the environment) and the journal's keys. One `Scrubber` holds them all; the being's
journal, state and archive, the gateway client, every tool result and every log line
pass through it. The journal's keys are made when its first entry is written, so the
key file is read again whenever it changes.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import replace

from singularity.config import Settings
from singularity.errors import SingularityError
from singularity.journal.keyring import key_path, key_texts
from singularity.runtime.mind_import.document import ImportDocument
from singularity.secrets import MIN_FORM_CHARS, Scrubber, ScrubbingFilter, read_secret_file
from singularity.settings_check import Credentials

log = logging.getLogger(__name__)


def secret_values(settings: Settings, credentials: Credentials) -> list[str]:
    """Every configured secret value: the ones in use, and a configured one left unused."""
    values = [secret.reveal() for secret in settings.raw_secrets.values()]
    for secret in (credentials.brama_secret, credentials.most_token):
        if secret is not None:
            values.append(secret.reveal())
    for path in (settings.brama_secret_file, settings.brama_api_key_file):
        if path is not None:
            with contextlib.suppress(SingularityError):  # the one in use was checked already
                values.append(read_secret_file(path).reveal())
    return values


class Withholding:
    """The scrubber of one runtime, its log filter, and the journal key file it watches."""

    def __init__(self, settings: Settings, credentials: Credentials) -> None:
        values = secret_values(settings, credentials)
        if any(len(value) < MIN_FORM_CHARS for value in values):
            log.warning(
                "a configured secret is shorter than %d characters and cannot be withheld "
                "from what the runtime writes",
                MIN_FORM_CHARS,
            )
        self.scrubber = Scrubber(values)
        self._key_file = key_path(settings.state_dir, settings.journal_key_file)
        self._key_seen: tuple[int, int] | None = None
        self._filter = ScrubbingFilter(self.scrubber)
        self.refresh()

    def refresh(self) -> None:
        """Withhold the journal's keys too, reading the key file again if it changed."""
        try:
            info = os.stat(self._key_file)
        except OSError:
            return
        seen = (info.st_ino, info.st_mtime_ns)
        if seen != self._key_seen:
            self._key_seen = seen
            for text in key_texts(self._key_file):
                self.scrubber.add(text)

    def install(self) -> None:
        """Scrub every record the process's log handlers write."""
        for handler in logging.getLogger().handlers:
            handler.addFilter(self._filter)

    def uninstall(self) -> None:
        """Take the filter off again (the runtime is done)."""
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self._filter)


def withheld_import(document: ImportDocument, scrubber: Scrubber) -> ImportDocument:
    """An import document whose item texts hold none of the runtime's secrets."""
    items = [replace(item, text=scrubber.text(item.text)) for item in document.items]
    return replace(document, items=items)
