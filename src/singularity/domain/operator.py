"""What an operator may ask of a being: the requests of the operator inbox.

A request is data with an id, written once and applied once by the being's own runtime
(or, for a stopped being, at its next start): a message for its next cycle, a pause, a
resume, a stop, a credit to its budget, a sanctum file written for it, or a decision on
a self-edit it proposed. Every request is validated in full here, before it is queued,
so a bad one is refused with a reason and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from singularity.errors import StateError
from singularity.jsoncodec import compact
from singularity.money import RANGE_TEXT, MoneyRangeError, parse_money, render_money
from singularity.timestamps import is_timestamp

RequestKind = Literal["message", "pause", "resume", "stop", "credit", "sanctum_write", "review"]
KINDS: tuple[RequestKind, ...] = (
    "message",
    "pause",
    "resume",
    "stop",
    "credit",
    "sanctum_write",
    "review",
)
MAX_MESSAGE_BYTES = 16384
MAX_NOTE_BYTES = 512
MAX_SANCTUM_BYTES = 256 * 1024
MAX_PATH_BYTES = 512
MAX_CREDIT = Decimal(10) ** 12
MAX_REQUEST_BYTES = MAX_SANCTUM_BYTES * 2 + 65536
DECISIONS = ("approve", "refuse")
OPERATOR_NAME = "operator"
MESSAGE_PREFIX = "Message from your operator: "


def sha256_text(text: str) -> str:
    """The SHA-256 hex digest of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class OperatorRequest:
    """One request; only the fields of its kind are set."""

    id: str
    kind: RequestKind
    at: str
    text: str | None = None
    amount: Decimal | None = None
    note: str | None = None
    path: str | None = None
    base_sha256: str | None = None
    proposal_id: str | None = None
    decision: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The request as its inbox file holds it (only its kind's fields)."""
        document: dict[str, Any] = {"id": self.id, "kind": self.kind, "at": self.at}
        for name in ("text", "note", "path", "base_sha256", "proposal_id", "decision"):
            value = getattr(self, name)
            if value is not None:
                document[name] = value
        if self.amount is not None:
            document["amount"] = render_money(self.amount)
        return document

    def encode(self) -> bytes:
        """Compact JSON bytes."""
        return compact(self.to_json()).encode("utf-8")

    def describe(self) -> str:
        """A short account for listings and logs, with no message or file text."""
        if self.kind == "message":
            return f"message of {len((self.text or '').encode('utf-8'))} bytes"
        if self.kind == "credit":
            return f"credit of {render_money(self.amount or Decimal(0))} USD"
        if self.kind == "sanctum_write":
            return f"write of sanctum file {self.path}"
        if self.kind == "review":
            return f"{self.decision} self-edit {self.proposal_id}"
        return self.kind


def _text(document: dict[str, Any], name: str, limit: int, *, empty: bool = False) -> str:
    value = document.get(name)
    if not isinstance(value, str):
        raise StateError(f"operator request: {name} must be a string")
    if not empty and not value.strip():
        raise StateError(f"operator request: {name} must not be empty")
    if len(value.encode("utf-8", "surrogatepass")) > limit:
        raise StateError(f"operator request: {name} is longer than {limit} bytes")
    if "\x00" in value:
        raise StateError(f"operator request: {name} must not contain NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise StateError(f"operator request: {name} is not valid Unicode text") from None
    return value


def _amount(document: dict[str, Any]) -> Decimal:
    raw = document.get("amount")
    if not isinstance(raw, str):
        raise StateError("operator request: amount must be a decimal string")
    try:
        amount = parse_money(raw)
    except MoneyRangeError:
        raise StateError(f"operator request: amount must be {RANGE_TEXT}") from None
    except ValueError:
        raise StateError(f"operator request: amount is not a decimal number: {raw!r}") from None
    if amount <= 0:
        raise StateError("operator request: amount must be more than zero")
    if amount > MAX_CREDIT:
        raise StateError(f"operator request: amount is more than {render_money(MAX_CREDIT)} USD")
    return amount


def _uuid(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise StateError(f"operator request: {name} must be a UUID")
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        raise StateError(f"operator request: {name} must be a UUID") from None
    if str(parsed) != value:
        raise StateError(f"operator request: {name} must be a lowercase UUID")
    return value


def _digest(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 64 or value.strip("0123456789abcdef"):
        raise StateError("operator request: base_sha256 must be 64 lowercase hex digits")
    return value


FIELDS: dict[str, frozenset[str]] = {
    "message": frozenset({"text"}),
    "pause": frozenset(),
    "resume": frozenset(),
    "stop": frozenset(),
    "credit": frozenset({"amount", "note"}),
    "sanctum_write": frozenset({"path", "text", "base_sha256"}),
    "review": frozenset({"proposal_id", "decision"}),
}


def parse_request(document: Any) -> OperatorRequest:
    """A request from its JSON form, fully checked; StateError says what is wrong."""
    if not isinstance(document, dict):
        raise StateError("operator request: must be a JSON object")
    kind = document.get("kind")
    if kind not in KINDS:
        raise StateError(f"operator request: unknown kind {kind!r}")
    unknown = sorted(set(document) - {"id", "kind", "at"} - FIELDS[kind])
    if unknown:
        raise StateError(f"operator request: unknown field {unknown[0]} for {kind}")
    request_id = _uuid(document.get("id"), "id")
    at = document.get("at")
    if not isinstance(at, str) or not is_timestamp(at):
        raise StateError("operator request: at must be an RFC 3339 timestamp")
    values: dict[str, Any] = {}
    if kind == "message":
        values["text"] = _text(document, "text", MAX_MESSAGE_BYTES)
    elif kind == "credit":
        values["amount"] = _amount(document)
        if "note" in document:
            values["note"] = _text(document, "note", MAX_NOTE_BYTES, empty=True)
    elif kind == "sanctum_write":
        values["path"] = _text(document, "path", MAX_PATH_BYTES)
        values["text"] = _text(document, "text", MAX_SANCTUM_BYTES, empty=True)
        values["base_sha256"] = _digest(document.get("base_sha256"))
    elif kind == "review":
        values["proposal_id"] = _uuid(document.get("proposal_id"), "proposal_id")
        decision = document.get("decision")
        if decision not in DECISIONS:
            raise StateError("operator request: decision must be approve or refuse")
        values["decision"] = decision
    return OperatorRequest(id=request_id, kind=kind, at=at, **values)


def decode_request(data: bytes) -> OperatorRequest:
    """A request from its encoded bytes."""
    if len(data) > MAX_REQUEST_BYTES:
        raise StateError("operator request: too large")
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise StateError(f"operator request: not JSON: {error}") from None
    return parse_request(document)


def new_request(kind: RequestKind, at: str, **fields: Any) -> OperatorRequest:
    """A new request with a fresh id, checked as if it had been read back."""
    document: dict[str, Any] = {"id": str(uuid.uuid4()), "kind": kind, "at": at}
    for name, value in fields.items():
        if value is None:
            continue
        document[name] = render_money(value) if isinstance(value, Decimal) else value
    return parse_request(document)


def operator_message(text: str) -> dict[str, Any]:
    """The `user` message that carries an operator's words into a cycle."""
    return {"role": "user", "name": OPERATOR_NAME, "content": MESSAGE_PREFIX + text}
