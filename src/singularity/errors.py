"""The whole error tree of the runtime.

Every error a command can end with derives from `SingularityError`, which carries the
display prefix of spec §18 and the exit code of spec §17. The CLI maps classes to
exit codes in one place (`singularity.cli.main`).

    SingularityError
    ├── ConfigurationError     "configuration: …"  exit 2
    ├── SecretFileError        "secret file: …"    exit 2
    ├── StateError             "state: …"          exit 4
    │   └── StateLockedError   another runtime holds the state directory's lock
    ├── FatalIoError           bare message         exit 4  (fsync or write failure)
    ├── UpstreamError                               exit 3  (carries a retry class)
    │   ├── BramaError         "brama: …"
    │   ├── McpError           "mcp: …"
    │   └── MostError          "most: …"
    ├── CatalogueError         "tool: …"            exit 5
    ├── RuntimeFailure         "runtime: …"         exit 5
    └── JsonFailure            bare message         exit 5

Errors the *model* causes are not exceptions: they are tool outcomes it sees
(`singularity.tools.base.Outcome`).
"""

from __future__ import annotations

from enum import Enum

from singularity.text import safe_text


class RetryClass(str, Enum):
    """How an upstream failure may be retried (spec §18)."""

    PERMANENT = "permanent"
    TRANSIENT = "transient"
    INDETERMINATE = "indeterminate"


class SingularityError(Exception):
    """Base of every error that ends a command; `str()` is the display text.

    A message may quote what was refused, so it is text from outside: made safe (a lone
    surrogate becomes U+FFFD) before anything can print, journal or send it.
    """

    prefix: str = ""
    exit_code: int = 5

    def __init__(self, message: str) -> None:
        message = safe_text(message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.prefix}: {self.message}" if self.prefix else self.message


class ConfigurationError(SingularityError):
    """The operator's configuration is wrong."""

    prefix = "configuration"
    exit_code = 2


class SecretFileError(SingularityError):
    """A secret file is missing, unsafe or empty."""

    prefix = "secret file"
    exit_code = 2


class StateError(SingularityError):
    """The state directory refuses the operation (boot matrix, lock, import, schema)."""

    prefix = "state"
    exit_code = 4


class StateLockedError(StateError):
    """Another runtime owns the state directory (decision 11)."""


class FatalIoError(SingularityError):
    """A write or fsync failed; the being must stop (never retried)."""

    exit_code = 4


class UpstreamError(SingularityError):
    """A failure of an external service, with its retry class."""

    exit_code = 3

    def __init__(self, message: str, retry: RetryClass = RetryClass.PERMANENT) -> None:
        super().__init__(message)
        self.retry = retry


class BramaError(UpstreamError):
    """The model gateway failed or answered outside its contract."""

    prefix = "brama"


class McpError(UpstreamError):
    """An MCP skill server failed."""

    prefix = "mcp"


class MostError(UpstreamError):
    """The Most messaging service failed."""

    prefix = "most"


class CatalogueError(SingularityError):
    """The tool catalogue cannot be built."""

    prefix = "tool"
    exit_code = 5


class RuntimeFailure(SingularityError):
    """The runtime cannot go on for a reason that is not one of the above."""

    prefix = "runtime"
    exit_code = 5


class JsonFailure(SingularityError):
    """A document that must be JSON of a given shape is not."""

    exit_code = 5
