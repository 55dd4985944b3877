"""Secret values and the files they come from (spec §3.3)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from singularity.errors import FatalIoError, SecretFileError


@dataclass(frozen=True)
class Secret:
    """A credential whose text never appears in repr, str or logs."""

    value: str = field(repr=False)

    def reveal(self) -> str:
        """The secret text; call only where it is used."""
        return self.value

    def __str__(self) -> str:
        return "<redacted>"

    def __repr__(self) -> str:
        return "Secret('<redacted>')"


def os_error_text(error: OSError) -> str:
    """An OS error as `<description> (os error N)`, without the Python-specific decoration."""
    if error.errno is None:
        return str(error)
    return f"{error.strerror or os.strerror(error.errno)} (os error {error.errno})"


def read_secret_file(path: str) -> Secret:
    """Read a secret file: regular (links followed), owner-only, non-empty after trailing CR/LF."""
    try:
        info = os.stat(path)
    except OSError:
        raise SecretFileError(f"not a regular file: {path}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SecretFileError(f"not a regular file: {path}")
    if info.st_mode & 0o077:
        raise SecretFileError(f"{path} must not be group/world accessible")
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except OSError as error:
        raise FatalIoError(f"cannot read secret file {path}: {os_error_text(error)}") from None
    except UnicodeDecodeError as error:
        raise FatalIoError(f"secret file {path} is not UTF-8: {error}") from None
    value = text.rstrip("\r\n")
    if not value:
        raise SecretFileError(f"{path} is empty")
    return Secret(value)
