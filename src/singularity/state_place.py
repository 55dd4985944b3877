"""Where a being lives, as `--state-dir` and `--state-url` name it (no I/O here).

`--state-dir D` names a state directory; `--state-url U` names either a directory (a path
or a `file://` URL) or a PostgreSQL state store (`postgresql://…`), in which `--agent-id`
selects the being. `StorePlace.parse` turns the option into a place, or raises a
`ConfigurationError` saying what is wrong; `singularity.store.opening` opens the being
there. The password of a URL is never shown in a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from singularity.errors import ConfigurationError

Backend = Literal["directory", "postgresql"]
POSTGRES_SCHEMES = ("postgresql", "postgres")
POSTGRES_EXTRA = "PostgreSQL needs the `postgres` extra (pip install 'singularity[postgres]')"


def shown_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        user = f"{parts.username}@" if parts.username else ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is not a number: only what follows the credentials
        return url.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}{host}{port}"))


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
        try:
            parts = urlsplit(url)
        except ValueError as error:  # a bracketed host left open, for one
            shown = shown_url(url)
            raise ConfigurationError(f"{option} {shown}: not a valid URL: {error}") from None
        scheme = parts.scheme.lower()
        if scheme in POSTGRES_SCHEMES:
            check_postgres_url(url, option)
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
                f"{option} {shown_url(url)}: unknown scheme {parts.scheme!r}; expected "
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
        return shown_url(self.location) if self.is_postgres else self.location

    def label(self, agent_id: str) -> str:
        """`state directory D` or `being A in URL`, as the stores name themselves."""
        if self.is_postgres:
            return f"being {agent_id} in {self.shown()}"
        return f"state directory {self.location}"


SOURCE_RANK = {"flag": 0, "env": 1, "file": 2, "fallback": 3, "default": 4}
"""Where an option's value came from, the most direct first."""


def settle_state_url(
    state_dir: str, state_url: str | None, sources: Mapping[str, str], label: str
) -> tuple[str, str | None]:
    """`state_dir` and `state_url` as the settings keep them: the URL checked (`label`
    names it in errors), and kept only when it names a PostgreSQL store.

    A directory URL is another spelling of `state_dir`: of the two, the one given more
    directly (`sources`: flag, then environment, then file) names the directory; given
    alike, they must agree.
    """
    if state_url is None:
        return state_dir, None
    place = StorePlace.parse(state_url, label)
    if place.is_postgres:
        return state_dir, state_url
    url_rank, dir_rank = SOURCE_RANK[sources["state_url"]], SOURCE_RANK[sources["state_dir"]]
    if dir_rank < url_rank:
        return state_dir, None
    if dir_rank == url_rank and state_dir != place.location:
        raise ConfigurationError(
            f"--state-dir {state_dir} and --state-url {state_url} name two directories; give one"
        )
    return place.location, None


def check_postgres_url(url: str, option: str) -> None:
    """Refuse (`ConfigurationError`, naming `option`) a PostgreSQL URL libpq cannot parse,
    or any when psycopg is not installed; the state store's and the journal's URLs alike."""
    try:
        import psycopg
    except ImportError:
        raise ConfigurationError(f"{option}: {POSTGRES_EXTRA}") from None
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:  # libpq's parser refused it
        raise ConfigurationError(f"{option} {shown_url(url)}: not a valid URL: {error}") from None
