"""The configuration checks of spec §3.2, in their order, with their exact messages."""

from __future__ import annotations

import ipaddress
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal, cast
from urllib.parse import urlsplit

from singularity.config import DEFAULT_WORKSPACE, Settings, finite
from singularity.domain.identity import HEX_FIELDS, IDENTIFIER_FIELDS, is_hex64, is_identifier
from singularity.errors import ConfigurationError
from singularity.jsoncodec import loads_strict
from singularity.secrets import Secret, os_error_text, read_secret_file

MAX_STIMULUS_BYTES = 65536
AuthMode = Literal["hmac", "bearer", "hmac+bearer", "none"]


@dataclass(frozen=True)
class Credentials:
    """The secrets a runtime needs, read from their files once."""

    brama_secret: Secret | None
    """The HMAC secret that signs completions (spec §9.2)."""
    brama_api_key: Secret | None
    """The bearer key sent as `Authorization` (decision 5)."""
    most_token: Secret | None

    @property
    def brama_mode(self) -> AuthMode:
        """`hmac`, `bearer`, `hmac+bearer` (both are sent) or `none`."""
        if self.brama_secret is not None and self.brama_api_key is not None:
            return "hmac+bearer"
        if self.brama_secret is not None:
            return "hmac"
        return "bearer" if self.brama_api_key is not None else "none"


def check_stimulus(settings: Settings) -> None:
    """Step 1: the stimulus bound."""
    stimulus = settings.stimulus
    if stimulus is not None and (
        len(stimulus.encode("utf-8", "surrogatepass")) > MAX_STIMULUS_BYTES or "\x00" in stimulus
    ):
        raise ConfigurationError("stimulus must be at most 65536 bytes and contain no NUL")


def canonical_workspace(path: str) -> str:
    """Step 2: the workspace canonicalized, which must be an existing directory."""
    try:
        resolved = os.path.realpath(path, strict=True)
    except OSError as error:
        raise ConfigurationError(f"workspace: {os_error_text(error)}") from None
    if not os.path.isdir(resolved):
        raise ConfigurationError("workspace must be a directory")
    return resolved


def born_workspace(settings: Settings) -> bool:
    """Whether the workspace is the default one, missing, and created when a being is born.

    With no flags a new being's workspace is `./workspace` (decision 24); a workspace that
    was named, or a resumed being's, must exist.
    """
    return (
        settings.workspace == DEFAULT_WORKSPACE
        and not settings.resume
        and not os.path.lexists(settings.workspace)
    )


def workspace_root(settings: Settings) -> str:
    """Step 2: the canonical workspace, or where the default one will be created at birth."""
    if born_workspace(settings):
        return os.path.realpath(settings.workspace)
    return canonical_workspace(settings.workspace)


def check_numbers(settings: Settings) -> None:
    """Steps 3 to 5: rounds, prices and temperature."""
    if settings.max_tool_rounds <= 0:
        raise ConfigurationError("max tool rounds must be positive")
    money = (
        settings.starting_balance,
        settings.instance_price,
        settings.input_price,
        settings.output_price,
    )
    if any(value < Decimal(0) for value in money):
        raise ConfigurationError("prices and balance cannot be negative")
    if not finite(settings.temperature) or not 0 <= settings.temperature <= 2:
        raise ConfigurationError("temperature must be finite and between zero and two")
    if settings.context_tokens <= 0:
        raise ConfigurationError("context tokens must be positive")
    timeouts = (settings.http_timeout_secs, settings.mcp_timeout_secs)
    if any(not finite(value) or value <= 0 for value in timeouts):
        raise ConfigurationError("timeouts must be positive")
    waits = (settings.cycle_interval_secs, settings.shutdown_grace_secs)
    if any(not finite(value) or value < 0 for value in waits):
        raise ConfigurationError("intervals cannot be negative")


def _absolute_regular(path: str | None) -> bool:
    if not path or not os.path.isabs(path):
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def check_las(settings: Settings) -> None:
    """Steps 6 to 8, only when the Las aggregator is configured (decision 18)."""
    entrypoint = settings.las_entrypoint
    if entrypoint is None:
        return
    if not os.path.isfile(entrypoint):
        raise ConfigurationError(f"LAS entrypoint not found: {entrypoint}")
    files = (
        (settings.las_release_manifest, "LAS release manifest"),
        (settings.las_release_manifest_signature, "LAS release manifest signature"),
        (settings.las_release_trust_store, "LAS release trust store"),
    )
    for path, label in files:
        if not _absolute_regular(path):
            raise ConfigurationError(f"{label} must be an absolute regular file")
    watermark = settings.las_release_watermark
    if not watermark or not os.path.isabs(watermark):
        raise ConfigurationError("LAS release watermark must be an absolute path")


def check_skills_file(settings: Settings) -> None:
    """The skills file, when given, must be readable JSON (its shape is checked at boot)."""
    path = settings.skills_file
    if path is None:
        return
    try:
        with open(path, "rb") as handle:
            loads_strict(handle.read())
    except OSError as error:
        raise ConfigurationError(f"skills file {path}: {os_error_text(error)}") from None
    except (ValueError, RecursionError) as error:
        raise ConfigurationError(f"skills file {path}: not valid JSON: {error}") from None


def check_identity(settings: Settings) -> None:
    """Steps 9 and 10: identifiers and hex digests."""
    for name, label in IDENTIFIER_FIELDS:
        if not is_identifier(getattr(settings, name)):
            raise ConfigurationError(f"{label} is not a valid immutable identifier")
    for name, label in HEX_FIELDS:
        if not is_hex64(getattr(settings, name)):
            raise ConfigurationError(f"{label} must be 64 lowercase hexadecimal characters")


TOOL_CHOICES = ("auto", "required", "none")


def check_tool_choice(settings: Settings) -> None:
    """The optional `tool_choice`, one of OpenAI's three words."""
    choice = settings.brama_tool_choice
    if choice is not None and choice not in TOOL_CHOICES:
        raise ConfigurationError("BRAMA_TOOL_CHOICE must be auto, required or none")


def check_url(url: str, variable: str) -> None:
    """Steps 11 and 13: a parsable http or https URL."""
    try:
        parts = urlsplit(url)
    except ValueError as error:
        # urlsplit's only error is a bracketed host that is not closed or not IPv6.
        reason = "invalid IPv6 address" if "IPv6" in str(error) else str(error)
        raise ConfigurationError(f"{variable}: {reason}") from None
    try:
        port = parts.port
    except ValueError:
        raise ConfigurationError(f"{variable}: invalid port number") from None
    if not parts.scheme:
        raise ConfigurationError(f"{variable}: relative URL without a base")
    if parts.scheme not in ("http", "https"):
        raise ConfigurationError(f"{variable} must use http or https")
    if not parts.hostname:
        raise ConfigurationError(f"{variable}: empty host")
    del port


def is_loopback_host(host: str) -> bool:
    """True when a bind address or host name is loopback (`localhost`, 127.0.0.0/8, ::1)."""
    return is_loopback_url(f"http://[{host.strip('[]')}]/" if ":" in host else f"http://{host}/")


def is_loopback_url(url: str) -> bool:
    """True when the URL's host is `localhost` or a loopback address (127.0.0.0/8, ::1)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    if not host:
        return False
    if host.rstrip(".").lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def brama_credentials(settings: Settings) -> tuple[Secret | None, Secret | None]:
    """Step 12: the HMAC secret and the bearer key, each if configured (decision 5).

    Both are used when both are configured; neither is allowed only for a loopback gateway.
    """
    secret = settings.raw_secrets.get("WISENT_APP_AGENT_AUTH_SECRET")
    if settings.brama_secret_file is not None:
        secret = read_secret_file(settings.brama_secret_file)
    api_key = settings.raw_secrets.get("BRAMA_API_KEY")
    if settings.brama_api_key_file is not None:
        api_key = read_secret_file(settings.brama_api_key_file)
    if secret is None and api_key is None and not is_loopback_url(settings.brama_url):
        raise ConfigurationError(
            "a non-loopback BRAMA_BASE_URL needs a credential: BRAMA_HMAC_SECRET_FILE, "
            "WISENT_APP_AGENT_AUTH_SECRET, BRAMA_API_KEY_FILE, BRAMA_API_KEY or OPENAI_API_KEY"
        )
    return secret, api_key


def _most_token(settings: Settings) -> Secret | None:
    path = settings.most_token_file
    return read_secret_file(path) if path is not None else None


Step = tuple[str, Callable[[Settings], object]]
RUNTIME_STEPS: tuple[Step, ...] = (
    ("stimulus", check_stimulus),
    ("workspace", workspace_root),
    ("limits", check_numbers),
    ("las", check_las),
    ("skills file", check_skills_file),
    ("identity", check_identity),
    ("gateway url", lambda settings: check_url(settings.brama_url, "BRAMA_BASE_URL")),
    ("tool choice", check_tool_choice),
    ("gateway credential", brama_credentials),
    ("most url", lambda settings: check_url(settings.most_url, "MOST_BASE_URL")),
    ("most token", _most_token),
)
"""The checks of spec §3.2 in their order, named; each needs only the settings, so `doctor`
can run them all where `run` stops at the first failure."""


def check_runtime(settings: Settings) -> Credentials:
    """Every check of spec §3.2 for `run`, `once` and `doctor`; returns the secrets."""
    done = {name: step(settings) for name, step in RUNTIME_STEPS}
    secret, api_key = cast(tuple[Secret | None, Secret | None], done["gateway credential"])
    return Credentials(secret, api_key, cast(Secret | None, done["most token"]))
