"""A being's immutable identity (spec §4) and the rules for its fields."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from singularity.config import U64_MAX, UNPINNED_HEX, Settings

# Matched with `fullmatch`: `$` would also accept a trailing newline.
IDENTIFIER = re.compile(r"[A-Za-z0-9._:-]{1,128}")
HEX64 = re.compile(r"[0-9a-f]{64}")
__all__ = ["UNPINNED_HEX", "Identity", "identity_from", "is_hex64", "is_identifier"]

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
    return IDENTIFIER.fullmatch(value) is not None


def is_hex64(value: str) -> bool:
    """64 lowercase hexadecimal characters."""
    return HEX64.fullmatch(value) is not None


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


def identity_from(settings: Settings) -> Identity:
    """The identity a configuration describes."""
    return Identity(
        agent_id=settings.agent_id,
        name=settings.agent_name,
        ticker=settings.agent_ticker,
        agent_type=settings.agent_type,
        specialty=settings.specialty,
        role=settings.role,
        environment=settings.environment,
        host=settings.host,
        workload_id=settings.workload_id,
        workload_public_key=settings.workload_public_key,
        executable_digest=settings.executable_digest,
        code_digest=settings.code_digest,
        policy_digest=settings.policy_digest,
        policy_sequence=settings.policy_sequence,
    )
