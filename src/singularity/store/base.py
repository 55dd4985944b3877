"""The state store: where one being lives, behind one small protocol.

The runtime holds a being through a `StateStore`: it loads the being once, then commits
each durable step (the activity events of the step and the state as it is after them);
the store finds what changed and makes exactly that durable, in one sync (directory) or
one transaction (PostgreSQL). Nothing above this protocol knows which backend it has.

    DirectoryStore   <state-dir>/state.json checkpoints + state.redo, activity.jsonl,
                     conversation.jsonl; one writer by an advisory lock
    PostgresStore    rows in schema `singularity` (one per memory, per message, per event);
                     one writer by a fencing lease

`docs/state-store.md` describes both, when `state.json` alone is current, and the lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from singularity.domain.records import ChatMessage
from singularity.domain.state import AgentState
from singularity.errors import FatalIoError, JsonFailure, StateError

Event = dict[str, Any]


class LeaseLost(FatalIoError):
    """Another runtime took the being over: this one's writes are refused (never retried)."""


class NoBeing(StateError):
    """The store holds no such being, and the opener was not asked to make room for one."""


def state_of(document: dict[str, Any], source: str) -> AgentState:
    """Validate a state's JSON document rebuilt by a backend; JsonFailure names `source`."""
    try:
        return AgentState.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "<root>"
        raise JsonFailure(f"{source} does not match being-v1: {where}: {first['msg']}") from None


class StateStore(Protocol):
    """One being's durable home: its state, activity journal and conversation archive."""

    @property
    def label(self) -> str:
        """Where the being lives, for messages (`state directory D`, `being A in URL`)."""
        ...

    def load(self) -> AgentState | None:
        """The being as its last durable step left it, after recovery; None when there is none.

        Called once, right after the store is opened; it also reads the activity journal
        (`events_at_open`).
        """
        ...

    @property
    def events_at_open(self) -> list[Event]:
        """The activity journal as `load` found it (the ledger reconciles with it)."""
        ...

    def commit(self, state: AgentState, events: Sequence[Event]) -> None:
        """Make one step durable: these events appended, the state as it is now.

        Only what changed since the last commit is written. When it returns, a crash
        cannot lose the step; when it raises (`FatalIoError`, `LeaseLost`) nothing of the
        step is durable and the store accepts no more writes.
        """
        ...

    def checkpoint(self, state: AgentState) -> None:
        """Write the whole state where readers of the backend expect it (a clean stop)."""
        ...

    def archived(self, start: int = 0, stop: int | None = None) -> list[ChatMessage]:
        """Messages that left the conversation window, by their index from the first."""
        ...

    def close(self) -> None:
        """Release the being (the lock, the lease) and close what is open."""
        ...
