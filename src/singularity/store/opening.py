"""Where a being lives, as the options name it, and the one way to open it there.

`--state-dir D` names a state directory; `--state-url U` names either a directory
(a path or a `file://` URL) or a PostgreSQL state store (`postgresql://…`), in which
`--agent-id` selects the being. `StorePlace.parse` turns the option into a place, with
a `ConfigurationError` saying what is wrong; then

    open_store_at(place, agent_id)    the being's store, its single-writer hold taken
    peek_state_at(place, agent_id)    its current state, read without the hold
    peek_events_at(place, agent_id)   its activity journal, read without the hold

Every command that reaches a being's state goes through these, so the directory and
PostgreSQL backends stay interchangeable behind `StateStore`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit

from singularity.domain.state import AgentState
from singularity.errors import ConfigurationError, FatalIoError
from singularity.secrets import os_error_text
from singularity.storage import fsio
from singularity.storage.activity import read_events
from singularity.store.base import Event, StateStore
from singularity.store.directory import DirectoryStore, peek_state

Backend = Literal["directory", "postgresql"]
POSTGRES_SCHEMES = ("postgresql", "postgres")
POSTGRES_EXTRA = (
    "the PostgreSQL state store needs the `postgres` extra (pip install 'singularity[postgres]')"
)


@dataclass(frozen=True)
class StorePlace:
    """A state directory (`location` is its path) or a PostgreSQL store (its URL)."""

    backend: Backend
    location: str

    @classmethod
    def directory(cls, path: str) -> StorePlace:
        """The state directory at `path` (as given: relative paths stay relative)."""
        if not path:
            raise ConfigurationError("--state-dir: empty path")
        return cls("directory", path)

    @classmethod
    def parse(cls, url: str, option: str = "--state-url") -> StorePlace:
        """A `--state-url`: `postgresql://…`, `file:///path`, or a plain directory path."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme in POSTGRES_SCHEMES:
            _check_postgres_url(url, option)
            return cls("postgresql", url)
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise ConfigurationError(
                    f"{option} {url}: a file URL names a local path (file:///path)"
                )
            if parts.query or parts.fragment:
                raise ConfigurationError(f"{option} {url}: a file URL takes no query or fragment")
            path = unquote(parts.path)
        elif scheme == "":
            path = url
        else:
            raise ConfigurationError(
                f"{option} {_shown(url)}: unknown scheme {parts.scheme!r}; expected "
                "postgresql://…, file:///path or a directory path"
            )
        if not path:
            raise ConfigurationError(f"{option}: empty path")
        return cls("directory", path)

    @classmethod
    def chosen(cls, state_dir: str, state_url: str | None) -> StorePlace:
        """The place the options name: `--state-url` when given, else `--state-dir`."""
        return cls.parse(state_url) if state_url is not None else cls.directory(state_dir)

    @property
    def is_postgres(self) -> bool:
        """Whether the being lives in a PostgreSQL store."""
        return self.backend == "postgresql"

    def shown(self) -> str:
        """The place for messages: the path, or the URL without its password."""
        return _shown(self.location) if self.is_postgres else self.location

    def label(self, agent_id: str) -> str:
        """`state directory D` or `being A in URL`, as the stores name themselves."""
        if self.is_postgres:
            return f"being {agent_id} in {self.shown()}"
        return f"state directory {self.location}"


def _check_postgres_url(url: str, option: str) -> None:
    try:
        import psycopg
    except ImportError:
        raise ConfigurationError(f"{option}: {POSTGRES_EXTRA}") from None
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:  # libpq's parser refused it
        raise ConfigurationError(f"{option} {_shown(url)}: not a valid URL: {error}") from None


def _shown(url: str) -> str:
    from singularity.store.postgres.store import shown_url

    try:
        return shown_url(url)
    except ValueError:  # a port that is not a number: show the scheme and host part only
        return url.split("@")[-1] if "@" in url else url


def open_store_at(
    place: StorePlace, agent_id: str, *, create: bool = True, lease_secs: float | None = None
) -> StateStore:
    """Open the being's store and take its single-writer hold; nothing is read yet.

    A state directory is created (0700) when `create`; a PostgreSQL store is migrated,
    and its being's lease taken (`lease_secs`, by default the store's). A second runtime
    is refused with `StateLockedError` either way.
    """
    if not place.is_postgres:
        return DirectoryStore.open(place.location, create=create)
    from singularity.store.postgres import lease
    from singularity.store.postgres.store import PostgresStore

    seconds = lease.DEFAULT_LEASE_SECS if lease_secs is None else lease_secs
    return PostgresStore.open(place.location, agent_id, lease_secs=seconds)


def peek_state_at(place: StorePlace, agent_id: str) -> AgentState | None:
    """The being's current state, without its hold and without changing anything; None
    when there is none (a state directory's log replayed in memory, a PostgreSQL store
    read in one read-only transaction)."""
    if not place.is_postgres:
        return peek_state(place.location)
    from singularity.store.postgres.reader import peek_being

    found = peek_being(place.location, agent_id)
    return found.state if found is not None else None


def peek_events_at(place: StorePlace, agent_id: str) -> list[Event]:
    """The being's activity journal as far as it is written, without its hold; empty
    when there is none (a torn last line of `activity.jsonl` is left out)."""
    if place.is_postgres:
        from singularity.store.postgres.reader import peek_being

        found = peek_being(place.location, agent_id)
        return found.events if found is not None else []
    try:
        dir_fd = fsio.open_dir(place.location)
    except FileNotFoundError:
        return []
    except OSError as error:
        raise FatalIoError(f"cannot open {place.location}: {os_error_text(error)}") from None
    try:
        return read_events(dir_fd)
    except OSError as error:
        raise FatalIoError(f"cannot read {place.location}: {os_error_text(error)}") from None
    finally:
        os.close(dir_fd)
