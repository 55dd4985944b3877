"""What a being lived, read as it grows, wherever its state is (`say --wait`, `log`).

A feed hands out the journal events and conversation messages that are new since its
last read, archived messages included, without the being's hold: a state directory is
read from its files (the state again only when `state.json` or its redo log changed),
a PostgreSQL store over one autocommit connection. The messages are read before the
events, and the runtime writes a round's journal before its state, so every round read
has its cost.
"""

from __future__ import annotations

import contextlib
import os
from typing import Protocol

from singularity.domain.records import ChatMessage
from singularity.errors import StateError
from singularity.runtime.talk.transcript import all_messages
from singularity.secrets import os_error_text
from singularity.state_place import StorePlace
from singularity.storage import fsio
from singularity.storage.activity import Event, read_from
from singularity.storage.statedir import STATE_FILE
from singularity.store.directory import peek_state
from singularity.store.redo import REDO_FILE

Stamp = tuple[tuple[int, int, int] | None, ...]


class Feed(Protocol):
    """New events and messages of one being, read without its hold."""

    def next(self) -> tuple[list[Event], list[ChatMessage]]:
        """The events and messages written since the last call (all of them at first)."""
        ...

    def close(self) -> None:
        """Release what the feed holds open."""
        ...


def open_feed(place: StorePlace, agent_id: str) -> Feed:
    """The feed of the being at `place`; a `StateError` when there is none."""
    if place.is_postgres:
        return PostgresFeed(place.location, agent_id)
    return DirectoryFeed(place.location)


class DirectoryFeed:
    """A being in a state directory."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        missing = StateError(f"no being state exists at {os.path.join(state_dir, STATE_FILE)}")
        try:
            self.dir_fd = fsio.open_dir(state_dir)
        except FileNotFoundError:
            raise missing from None
        except OSError as error:
            raise StateError(f"cannot open {state_dir}: {os_error_text(error)}") from None
        if peek_state(state_dir) is None:
            os.close(self.dir_fd)
            raise missing
        self.offset = 0
        self.start = 0
        self.stamp: Stamp = ()

    def next(self) -> tuple[list[Event], list[ChatMessage]]:
        stamp = self._stamp()
        state = peek_state(self.state_dir) if stamp != self.stamp else None
        self.stamp = stamp
        events, self.offset = read_from(self.dir_fd, self.offset)
        if state is None:
            return events, []
        messages = all_messages(self.dir_fd, state, self.start)
        self.start += len(messages)
        return events, messages

    def _stamp(self) -> Stamp:
        """What changes whenever a step is committed to the directory."""
        found: list[tuple[int, int, int] | None] = []
        for name in (STATE_FILE, REDO_FILE):
            try:
                info = os.stat(name, dir_fd=self.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                found.append(None)
                continue
            found.append((info.st_mtime_ns, info.st_size, info.st_ino))
        return tuple(found)

    def close(self) -> None:
        os.close(self.dir_fd)


class PostgresFeed:
    """A being in a PostgreSQL state store, read without its lease."""

    def __init__(self, url: str, agent_id: str) -> None:
        import psycopg

        from singularity.store.postgres.census import holds_being
        from singularity.store.postgres.store import connect

        self.agent_id = agent_id
        self.label = StorePlace("postgresql", url).label(agent_id)
        self.db = connect(url)
        try:
            found = holds_being(self.db, agent_id)
        except psycopg.Error as error:
            self.close()
            raise StateError(f"cannot read {self.label}: {error}") from None
        if not found:
            self.close()
            raise StateError(f"no being state exists for {self.label}")
        self.seq = 0
        self.start = 0

    def next(self) -> tuple[list[Event], list[ChatMessage]]:
        import psycopg

        from singularity.store.postgres.census import events_after, messages_from

        try:
            messages = messages_from(self.db, self.agent_id, self.start)
            found = events_after(self.db, self.agent_id, self.seq)
        except psycopg.Error as error:
            raise StateError(f"cannot read {self.label}: {error}") from None
        self.start += len(messages)
        if found:
            self.seq = found[-1][0]
        return [event for _, event in found], messages

    def close(self) -> None:
        import psycopg

        with contextlib.suppress(psycopg.Error):
            self.db.close()
