"""A being's immutable identity (spec §4) and the rules for its fields."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

IDENTIFIER = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
UNPINNED_HEX = "0" * 64
U64_MAX = 2**64 - 1

# (field, label) in the order of spec §3.2 steps 9 and 10.
IDENTIFIER_FIELDS = (
    ("agent_id", "agent id"),
    ("role", "role"),
    ("environment", "environment"),
    ("host", "host"),
    ("workload_id", "workload id"),
)
HEX_FIELDS = (
    ("workload_public_key", "workload public key"),
    ("executable_digest", "executable digest"),
    ("code_digest", "code digest"),
    ("policy_digest", "policy digest"),
)


def is_identifier(value: str) -> bool:
    """1–128 ASCII letters, digits, `-`, `_`, `.`, `:`."""
    return bool(IDENTIFIER.match(value))


def is_hex64(value: str) -> bool:
    """64 lowercase hexadecimal characters."""
    return bool(HEX64.match(value))


class Identity(BaseModel):
    """Who a being is; built from configuration, never writable by the model."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    agent_id: str
    name: str
    ticker: str
    agent_type: str
    specialty: str
    role: str
    environment: str
    host: str
    workload_id: str
    workload_public_key: str
    executable_digest: str
    code_digest: str
    policy_digest: str
    policy_sequence: int = Field(ge=0, le=U64_MAX)
