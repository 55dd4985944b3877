"""The whole being as `state.json` holds it: schema `being-v1` (spec §5.4)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticSerializationError

from singularity.domain.budget import Budget
from singularity.domain.identity import Identity
from singularity.domain.mind import Mind, initial_prompt
from singularity.domain.records import (
    ActionRecord,
    ChatMessage,
    CreatedResources,
    JsonNumber,
    Timestamp,
)
from singularity.errors import JsonFailure, StateError
from singularity.jsoncodec import loads_strict, pretty
from singularity.text import safe_json

SCHEMA_VERSION: Literal["being-v1"] = "being-v1"
MAX_RECENT_ACTIONS = 100
BeingStatus = Literal["starting", "running", "stopping", "stopped", "exhausted", "failed"]


class AgentState(BaseModel):
    """A being: identity, mind, status, budget, conversation and recent actions."""

    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: Literal["being-v1"]
    identity: Identity
    mind: Mind
    status: BeingStatus
    cycle: int
    budget: Budget
    conversation: list[ChatMessage]
    recent_actions: list[ActionRecord]
    created_resources: CreatedResources
    started_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def new(cls, identity: Identity, model: str, starting: Decimal, now: str) -> AgentState:
        """A being that has just been created: initial prompt, full budget, no history."""
        return cls(
            schema_version=SCHEMA_VERSION,
            identity=identity,
            mind=Mind(
                system_prompt=initial_prompt(identity.name, identity.specialty),
                rules=[],
                learnings=[],
                memories=[],
                children=[],
                current_model=model,
            ),
            status="starting",
            cycle=0,
            budget=Budget.fresh(starting),
            conversation=[],
            recent_actions=[],
            created_resources=CreatedResources(),
            started_at=now,
            updated_at=now,
        )

    def record_action(self, record: ActionRecord) -> None:
        """Append an action record, keeping the newest 100."""
        self.recent_actions.append(record)
        if len(self.recent_actions) > MAX_RECENT_ACTIONS:
            del self.recent_actions[: len(self.recent_actions) - MAX_RECENT_ACTIONS]

    def to_json(self) -> bytes:
        """The pretty JSON bytes written to `state.json`; a state can always be saved.

        A lone surrogate that reached the state past `safe_text` cannot be written as
        UTF-8: rather than make the being unsavable, it is saved as U+FFFD.
        """
        try:
            return self.model_dump_json(indent=2).encode("utf-8")
        except PydanticSerializationError:
            return pretty(safe_json(self.model_dump())).encode("utf-8")


def parse_state(data: bytes) -> AgentState:
    """Parse `state.json` bytes.

    A JSON or shape error is a JSON failure; another schema version is a state error.
    """
    try:
        document = _load_json(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise JsonFailure(f"state.json is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise JsonFailure("state.json must hold a JSON object")
    version = document.get("schema_version")
    if not isinstance(version, str):
        # Not a schema this or any version writes: a structure error, like serde's.
        raise JsonFailure(
            "state.json does not match being-v1: schema_version: missing or not a string"
        )
    if version != SCHEMA_VERSION:
        raise StateError(f"unsupported state schema {version}")
    try:
        return AgentState.model_validate(document)
    except ValidationError as error:
        raise JsonFailure(f"state.json does not match being-v1: {_first_error(error)}") from None


_MAY_HOLD_SURROGATES = re.compile(rb"\\[uU][dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _load_json(data: bytes) -> Any:
    """Strict JSON (no NaN/Infinity, no duplicate keys) whose fractional numbers keep their text.

    A file is text from outside: a lone surrogate it spells (`\\ud800`) becomes U+FFFD.
    """
    document = loads_strict(data, parse_float=JsonNumber)
    if _MAY_HOLD_SURROGATES.search(data):
        document = safe_json(document)
    return document


def _first_error(error: ValidationError) -> str:
    details = error.errors()
    first = details[0]
    location = ".".join(str(part) for part in first["loc"]) or "<root>"
    more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
    return f"{location}: {first['msg']}{more}"
