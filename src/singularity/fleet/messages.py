"""What the fleet's workflows and activities pass each other: small, plain data.

Temporal records these values in a workflow's history, so none of them holds the
conversation, the mind or a secret: a being's spec (its key and the options its operator
set), the operator's requests still waiting for it, and what each visit reports back (its
status and money, what it lived, when it is due again). Money is a decimal string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_QUEUE = "beings"
WORKFLOW_NAME = "Being"
VISIT_ACTIVITY = "visit"
HISTORY_EVENTS = 2000
"""A run of a being's workflow continues as new past this many events (Temporal's limit is
51,200)."""
KEY_SEPARATOR = "/"
"""A child's key is its parent's key, this separator and the child's id."""


@dataclass
class BeingSpec:
    """A being of the fleet: its key (the workflow id), its options, where it may be placed."""

    key: str
    options: dict[str, str] = field(default_factory=dict)
    """Option name to value, as flags of `run` would give them (identity, budget, loop)."""
    task_queue: str = DEFAULT_QUEUE
    """The queue any worker that may open this being listens on (pinning is a queue)."""
    parent: str | None = None
    """The parent's key, for a child."""


@dataclass
class Visit:
    """One visit of a worker to a being."""

    spec: BeingSpec
    requests: list[dict[str, Any]] = field(default_factory=list)
    """Operator requests (their JSON) not yet settled; each is applied once, by its id."""
    live: bool = False
    """Live a cycle (a pulse in Pulse mode) now, if the being may."""
    rest: bool = False
    """Apply the requests and release the being: it stops."""


@dataclass
class QuietWindow:
    """A daily window in which no pulse starts (`singularity.sanctum.pulse.QuietHours`)."""

    start: int
    end: int
    offset_secs: int


@dataclass
class PulsePlan:
    """When a being in Pulse mode is due: how often, and never in its quiet hours."""

    frequency_secs: float
    quiet: list[QuietWindow] = field(default_factory=list)


@dataclass
class NewChild:
    """A child its parent funded during a visit, to be started as a child workflow."""

    key: str
    child_id: str
    name: str
    ticker: str
    specialty: str


@dataclass
class Visited:
    """What a visit found and did."""

    worker: str
    """The visiting worker (`host:pid`)."""
    queue: str
    """The worker's own queue: the being stays open there, and is visited there next."""
    status: str
    """The being's status after the visit: running, paused, exhausted, stopped or failed."""
    cycle: int
    balance_usd: str
    earned_usd: str
    spent_usd: str
    settled: list[str] = field(default_factory=list)
    """Ids of the requests whose effect is durable (or that were refused)."""
    lived: str | None = None
    """The status of the cycle or pulse lived in this visit, if one was."""
    reply: str | None = None
    """The closing text of that cycle."""
    wait_secs: float = 0.0
    """Seconds until the next cycle (the interval, longer after failures)."""
    pulse: PulsePlan | None = None
    """The schedule, for a being in Pulse mode (the workflow keeps its time)."""
    children: list[NewChild] = field(default_factory=list)
    failure: str | None = None
    """Why the being failed, when it did."""


@dataclass
class Carry:
    """The workflow's state, carried across continue-as-new (and its input)."""

    spec: BeingSpec
    requests: list[dict[str, Any]] = field(default_factory=list)
    last: Visited | None = None
    resident: str | None = None
    """The queue of the worker that holds the being open, if one does."""
    due_at: str | None = None
    """When the next cycle is due, in workflow time (RFC 3339); None: now."""
    last_pulse_at: str | None = None
    children: list[str] = field(default_factory=list)
    """Keys of the children started as child workflows."""
    cycles: int = 0
    """Cycles (or pulses) lived through the fleet, over every run of the workflow."""
    visits: int = 0
    runs: int = 1
    """Runs of the workflow: one more at each continue-as-new."""
    replies: dict[str, str] = field(default_factory=dict)
    """The newest replies to operator messages, by request id (for `say --wait`)."""
    history_events: int = HISTORY_EVENTS
    """Events of one run's history past which the workflow continues as new."""


@dataclass
class Status:
    """What the status query answers."""

    key: str
    status: str
    cycle: int
    balance_usd: str
    earned_usd: str
    spent_usd: str
    waiting: list[str]
    """The requests not yet settled, described (never a message's text)."""
    worker: str | None
    due_at: str | None
    cycles: int
    visits: int
    runs: int
    children: list[str]
    lived: str | None
    failure: str | None
