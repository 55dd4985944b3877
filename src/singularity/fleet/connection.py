"""How the fleet reaches Temporal: one connection for every `fleet` command and the worker.

A home lab's Temporal speaks plain gRPC on loopback. A production server, or Temporal
Cloud, speaks TLS: the server's certificate checked against the system's authorities or
a CA of the operator's own (`--temporal-ca-file`), the name it is checked for set by
`--temporal-tls-server-name`, and the client known by a certificate and key of its own
(mTLS: `--temporal-cert-file` with `--temporal-key-file`) or by an API key read from a
file (`--temporal-api-key-file`). Naming any of these turns TLS on; `--temporal-tls`
turns it on with the system's authorities alone. The key and the API key are secret
files (owner-only, as every secret of the runtime); their text is never logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from temporalio.client import Client
from temporalio.service import TLSConfig

from singularity.errors import ConfigurationError
from singularity.secrets import os_error_text, read_secret_file

PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
PEM_PRIVATE_KEY = b"PRIVATE KEY-----"
AFTER_CONNECTION = "call error after connection"
"""In the SDK's error: the server took the TCP connection, then the first call failed."""
REFUSED_CREDENTIALS = ("code: Unauthenticated", "code: PermissionDenied")
HINTS = {
    "UnknownIssuer": "no authority it trusts signed the server's certificate "
    "(--temporal-ca-file names the one that did)",
    "NotValidForName": "the server's certificate is not valid for the name it was "
    "reached by (--temporal-tls-server-name names the one it holds)",
}


@dataclass(frozen=True)
class TemporalConnection:
    """Where Temporal is and how to reach it; files are read only when connecting."""

    target: str = "127.0.0.1:7233"
    namespace: str = "default"
    tls: bool | None = None
    """True or False as the operator said; None: on when a TLS file or API key is named."""
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    api_key_file: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            given, missing = (
                ("--temporal-cert-file", "--temporal-key-file")
                if self.key_file is None
                else ("--temporal-key-file", "--temporal-cert-file")
            )
            raise ConfigurationError(f"{given} needs {missing}: a client certificate is a pair")
        if self.tls is False and self._tls_named():
            raise ConfigurationError(
                f"{self._tls_named()[0]} needs TLS, which SINGULARITY_TEMPORAL_TLS=false turns off"
            )
        if self.server_name is not None and not self.server_name.strip():
            raise ConfigurationError("--temporal-tls-server-name must not be empty")

    @classmethod
    def from_options(cls, values: Mapping[str, object]) -> TemporalConnection:
        """The connection the resolved fleet options describe (`config.resolve_fleet`)."""

        def text(name: str) -> str | None:
            value = values.get(name)
            return None if value is None else str(value)

        tls = values.get("temporal_tls")
        return cls(
            target=text("temporal") or cls.target,
            namespace=text("temporal_namespace") or cls.namespace,
            tls=None if tls is None else bool(tls),
            ca_file=text("temporal_ca_file"),
            cert_file=text("temporal_cert_file"),
            key_file=text("temporal_key_file"),
            api_key_file=text("temporal_api_key_file"),
            server_name=text("temporal_tls_server_name"),
        )

    @property
    def uses_tls(self) -> bool:
        """Whether the connection speaks TLS."""
        return self.tls if self.tls is not None else bool(self._tls_named())

    def describe(self) -> str:
        """The address, and how it is reached (never a credential)."""
        how = []
        if self.uses_tls:
            how.append("TLS")
        if self.cert_file is not None:
            how.append("client certificate")
        if self.api_key_file is not None:
            how.append("API key")
        suffix = f" ({', '.join(how)})" if how else ""
        return f"{self.target}{suffix}, namespace {self.namespace}"

    def tls_config(self) -> TLSConfig | None:
        """The TLS settings for the client, with the files read (None: plain gRPC)."""
        if not self.uses_tls:
            return None
        cert, key = None, None
        if self.cert_file is not None and self.key_file is not None:
            cert = _read_pem(self.cert_file, "--temporal-cert-file", PEM_CERTIFICATE)
            key = (read_secret_file(self.key_file).reveal() + "\n").encode()
            if PEM_PRIVATE_KEY not in key:
                raise ConfigurationError(
                    f"--temporal-key-file {self.key_file}: not a PEM private key"
                )
        ca = None
        if self.ca_file is not None:
            ca = _read_pem(self.ca_file, "--temporal-ca-file", PEM_CERTIFICATE)
        return TLSConfig(
            server_root_ca_cert=ca,
            domain=self.server_name,
            client_cert=cert,
            client_private_key=key,
        )

    def api_key(self) -> str | None:
        """The API key, read from its file (None when none is named)."""
        if self.api_key_file is None:
            return None
        return read_secret_file(self.api_key_file).reveal()

    def _tls_named(self) -> list[str]:
        named = {
            "--temporal-ca-file": self.ca_file,
            "--temporal-cert-file": self.cert_file,
            "--temporal-key-file": self.key_file,
            "--temporal-api-key-file": self.api_key_file,
            "--temporal-tls-server-name": self.server_name,
        }
        return [flag for flag, value in named.items() if value is not None]


def _read_pem(path: str, flag: str, marker: bytes) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise ConfigurationError(f"{flag} {path}: {os_error_text(error)}") from None
    if marker not in data:
        raise ConfigurationError(f"{flag} {path}: not a PEM certificate")
    return data


async def connect(connection: TemporalConnection) -> Client:
    """A client of Temporal (ConfigurationError naming what failed when it cannot connect)."""
    tls = connection.tls_config()
    api_key = connection.api_key()
    try:
        return await Client.connect(
            connection.target,
            namespace=connection.namespace,
            tls=tls if tls is not None else False,
            api_key=api_key,
        )
    except RuntimeError as error:
        raise ConfigurationError(_unreachable(connection, str(error))) from None


def _unreachable(connection: TemporalConnection, error: str) -> str:
    error = error.removeprefix("Failed client connect: ")
    said = "".join(f"; {hint}" for hint in _hints(connection, error))
    return f"cannot reach Temporal at {connection.describe()}{said}: {error}"


def _hints(connection: TemporalConnection, error: str) -> list[str]:
    """What the operator can do about a failed connection, as far as its error tells."""
    hints = [hint for marker, hint in HINTS.items() if marker in error]
    if any(code in error for code in REFUSED_CREDENTIALS):
        hints.append("the server refused the client's credentials")
    elif AFTER_CONNECTION in error and not connection.uses_tls:
        hints.append("it took the connection but spoke no plain gRPC (TLS? --temporal-tls)")
    elif AFTER_CONNECTION in error and connection.cert_file is None:
        hints.append(
            "it ended the TLS connection (a client certificate? "
            "--temporal-cert-file and --temporal-key-file)"
        )
    return hints
