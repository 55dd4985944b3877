"""Beings built in memory for unit tests: a local identity and a new state around it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from singularity.domain.identity import Identity
from singularity.domain.state import AgentState

ZEROS = "0" * 64
CREATED_AT = "2026-01-01T00:00:00Z"


def identity(**fields: Any) -> Identity:
    """A local being named Ada (number theory), with zero digests; `fields` override."""
    values: dict[str, Any] = {
        "agent_id": "local",
        "name": "Ada",
        "ticker": "ADA",
        "agent_type": "general",
        "specialty": "number theory",
        "role": "being",
        "environment": "local",
        "host": "localhost",
        "workload_id": "local",
        "workload_public_key": ZEROS,
        "executable_digest": ZEROS,
        "code_digest": ZEROS,
        "policy_digest": ZEROS,
        "policy_sequence": 0,
    }
    return Identity(**{**values, **fields})


def new_state(
    of: Identity | None = None, *, model: str = "any", balance: Decimal = Decimal(10)
) -> AgentState:
    """A just-created being (`identity()` unless given), created at 2026-01-01T00:00:00Z."""
    return AgentState.new(of or identity(), model, balance, CREATED_AT)
