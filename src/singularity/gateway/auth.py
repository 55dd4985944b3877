"""Authentication of gateway requests: HMAC signing (spec §9.2), bearer keys, none.

Decision 5: a configured Brama secret signs every completion with the four
`x-agent-*` headers; a configured API key adds `Authorization: Bearer`; with neither
the request goes out bare (allowed only for a loopback gateway, which the
configuration enforces). `verify_hmac` is the server side of the same contract,
used by the scripted test server and the embedded gateway.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from singularity.errors import BramaError, RetryClass
from singularity.secrets import Secret as Secret

HEADER_AGENT_ID: Final = "x-agent-id"
HEADER_TIMESTAMP: Final = "x-agent-timestamp"
HEADER_BODY_SHA256: Final = "x-agent-body-sha256"
HEADER_SIGNATURE: Final = "x-agent-signature"
SIGNED_HEADERS: Final = (HEADER_AGENT_ID, HEADER_TIMESTAMP, HEADER_BODY_SHA256, HEADER_SIGNATURE)
DEFAULT_WINDOW_SECONDS: Final = 300
_MAX_TIMESTAMP_DIGITS: Final = 20


def is_header_safe(value: str) -> bool:
    """True when `value` is non-empty printable ASCII that can be sent as a header value."""
    return bool(value) and all(" " <= ch <= "~" for ch in value)


def body_sha256(body: bytes) -> str:
    """Lowercase hex SHA-256 of the exact body bytes."""
    return hashlib.sha256(body).hexdigest()


def hmac_signature(secret: Secret, agent_id: str, timestamp: str, body_hash: str) -> str:
    """Lowercase hex HMAC-SHA256 over `<agent_id>:<timestamp>:<body_sha256>`."""
    message = f"{agent_id}:{timestamp}:{body_hash}".encode()
    return hmac.new(secret.reveal().encode(), message, hashlib.sha256).hexdigest()


def hmac_headers(secret: Secret, agent_id: str, body: bytes, timestamp: int) -> dict[str, str]:
    """The four signed headers for one body sent at `timestamp` (Unix seconds)."""
    stamp = str(timestamp)
    digest = body_sha256(body)
    return {
        HEADER_AGENT_ID: agent_id,
        HEADER_TIMESTAMP: stamp,
        HEADER_BODY_SHA256: digest,
        HEADER_SIGNATURE: hmac_signature(secret, agent_id, stamp, digest),
    }


def _signer_error(detail: str) -> BramaError:
    return BramaError(f"cannot initialize signer: {detail}", retry=RetryClass.PERMANENT)


@dataclass(frozen=True)
class Auth:
    """How gateway requests are authenticated: HMAC secret, bearer key, both, or none."""

    hmac_secret: Secret | None = None
    bearer_token: Secret | None = None

    def __post_init__(self) -> None:
        if self.hmac_secret is not None and not self.hmac_secret.reveal():
            raise _signer_error("HMAC secret is empty")
        if self.bearer_token is not None and not is_header_safe(self.bearer_token.reveal()):
            raise _signer_error("API key must be non-empty printable ASCII")

    @classmethod
    def hmac(cls, secret: Secret | str) -> Auth:
        """HMAC signing of completions with `secret` (spec §9.2)."""
        return cls(hmac_secret=secret if isinstance(secret, Secret) else Secret(secret))

    @classmethod
    def bearer(cls, token: Secret | str) -> Auth:
        """`Authorization: Bearer <token>` on every request."""
        return cls(bearer_token=token if isinstance(token, Secret) else Secret(token))

    @classmethod
    def none(cls) -> Auth:
        """No authentication (loopback gateways only)."""
        return cls()

    @property
    def mode(self) -> str:
        """`hmac`, `bearer`, `hmac+bearer` or `none`."""
        names = [
            name
            for name, value in (("hmac", self.hmac_secret), ("bearer", self.bearer_token))
            if value is not None
        ]
        return "+".join(names) or "none"

    def read_headers(self) -> dict[str, str]:
        """Headers for unsigned requests (health, model list): the bearer key if any."""
        if self.bearer_token is None:
            return {}
        return {"authorization": f"Bearer {self.bearer_token.reveal()}"}

    def post_headers(self, agent_id: str, body: bytes, timestamp: int) -> dict[str, str]:
        """Headers for a JSON POST of exactly `body`: content type, signature, bearer key."""
        headers = {"content-type": "application/json"}
        if self.hmac_secret is not None:
            headers.update(hmac_headers(self.hmac_secret, agent_id, body, timestamp))
        headers.update(self.read_headers())
        return headers


@dataclass(frozen=True)
class Verification:
    """The verdict on one signed request: `ok`, or the reason it was refused."""

    ok: bool
    reason: str = ""
    agent_id: str = ""


def _refuse(reason: str) -> Verification:
    return Verification(ok=False, reason=reason)


def _lowered(headers: Mapping[str, str]) -> dict[str, str] | str:
    lowered: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if key in SIGNED_HEADERS and key in lowered:
            return f"duplicate header {key}"
        lowered[key] = value
    return lowered


def _is_lower_hex(value: str, length: int) -> bool:
    return len(value) == length and all(ch in "0123456789abcdef" for ch in value)


def verify_hmac(
    headers: Mapping[str, str],
    body: bytes,
    secret: Secret,
    *,
    clock: Callable[[], float],
    window_seconds: int = DEFAULT_WINDOW_SECONDS,
    expected_agent_id: str | None = None,
) -> Verification:
    """Check the four HMAC headers against `secret`, `body` and a ±window around `clock()`."""
    lowered = _lowered(headers)
    if isinstance(lowered, str):
        return _refuse(lowered)
    for name in SIGNED_HEADERS:
        if not lowered.get(name):
            return _refuse(f"missing header {name}")
    agent_id = lowered[HEADER_AGENT_ID]
    if expected_agent_id is not None and agent_id != expected_agent_id:
        return _refuse("unknown agent id")
    stamp = lowered[HEADER_TIMESTAMP]
    if not (stamp.isascii() and stamp.isdigit()) or len(stamp) > _MAX_TIMESTAMP_DIGITS:
        return _refuse("timestamp is not a decimal number of Unix seconds")
    if abs(int(stamp) - clock()) > window_seconds:
        return _refuse("timestamp outside the allowed window")
    claimed = lowered[HEADER_BODY_SHA256]
    if not _is_lower_hex(claimed, 64):
        return _refuse("body hash is not 64 lowercase hexadecimal characters")
    actual = body_sha256(body)
    if not hmac.compare_digest(claimed.encode(), actual.encode()):
        return _refuse("body hash does not match the body")
    provided = lowered[HEADER_SIGNATURE]
    if not _is_lower_hex(provided, 64):
        return _refuse("signature is not 64 lowercase hexadecimal characters")
    expected = hmac_signature(secret, agent_id, stamp, actual)
    if not hmac.compare_digest(provided.encode(), expected.encode()):
        return _refuse("signature does not match")
    return Verification(ok=True, agent_id=agent_id)
