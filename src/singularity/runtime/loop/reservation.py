"""What a model call may cost, reserved before it is made (decision 16).

The worst case of a call is its prompt at the input price, `max_tokens` at the output
price and its deadline at the instance price; it is an upper bound that uses what is
known:

- **the prompt**: every byte of the request (messages and tool definitions) counts as a
  token, a bound for any tokenizer whose tokens are at least a byte long; once the
  gateway has reported a round's prompt tokens, the next prompt counts at most those
  tokens plus one per byte of every message that round did not send, whichever of the
  two is smaller;
- **the deadline**: the configured HTTP timeout, shortened to what the balance can still
  pay for once the token worst case is set aside. A call the balance cannot give at
  least a second (or the whole timeout, when that is shorter) is not made.

The call is then made with that deadline, so no call can cost more instance time than
was reserved, and a call whose outcome stays unknown is charged exactly its reservation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from singularity.domain import events
from singularity.domain.budget import Budget
from singularity.gateway.encoding import Encoding
from singularity.runtime import ledger

MIN_DEADLINE_SECS = 1.0


@dataclass
class PromptMeter:
    """The newest round the gateway reported prompt tokens for: the count and what it sent."""

    tokens: int | None = None
    sent: dict[int, list[Encoding]] = field(default_factory=dict)
    """The messages that round sent, by their length: a message is looked up among those of
    its length, never hashed (a new system message is ~300 KiB on a full being, every round)."""

    def measured(self, texts: Sequence[Encoding], prompt_tokens: int) -> None:
        """Remember a round's reported prompt tokens (a report of zero tells nothing)."""
        if prompt_tokens > 0:
            self.tokens = prompt_tokens
            self.sent = {}
            for text in texts:
                self.sent.setdefault(len(text), []).append(text)

    def was_sent(self, text: Encoding) -> bool:
        """Whether the measured round sent these very bytes."""
        return any(known is text or known == text for known in self.sent.get(len(text), ()))


@dataclass(frozen=True)
class Reservation:
    """A call's worst case, the deadline it is made with, and the messages it measured."""

    charge: ledger.Charge
    deadline_secs: float
    shortest_secs: float
    texts: tuple[Encoding, ...]
    """The compact UTF-8 JSON of each message the call sends."""

    def affordable(self, budget: Budget) -> bool:
        """Whether the being can make the call: solvent, enough time, the worst case covered."""
        return self.deadline_secs >= self.shortest_secs and ledger.can_cover(budget, self.charge)


def prompt_estimate(meter: PromptMeter, texts: Sequence[Encoding], fixed_bytes: int) -> int:
    """The most prompt tokens a request of these encoded messages (and `fixed_bytes` more)
    can be."""
    every_byte = sum(len(text) + 1 for text in texts) + 1 + fixed_bytes
    if meter.tokens is None:
        return every_byte
    added = sum(len(text) + 1 for text in texts if not meter.was_sent(text))
    return min(every_byte, meter.tokens + added)


def plan(
    prices: ledger.Prices,
    budget: Budget,
    meter: PromptMeter,
    messages: Sequence[Encoding],
    *,
    fixed_bytes: int,
    max_tokens: int,
    timeout_secs: float,
) -> Reservation:
    """The reservation of a call sending `messages`, each as its compact UTF-8 JSON (and
    `fixed_bytes` of tool definitions)."""
    texts = tuple(messages)
    tokens = prompt_estimate(meter, texts, fixed_bytes)
    token_worst = ledger.token_cost(prices, tokens, max_tokens)
    deadline = ledger.affordable_deadline(prices, budget, token_worst, timeout_secs)
    charge = ledger.worst_case(prices, tokens, max_tokens, deadline)
    return Reservation(charge, deadline, min(MIN_DEADLINE_SECS, timeout_secs), texts)


@dataclass
class OpenReservations:
    """The reservations journaled in this process whose outcome is not journaled yet.

    It follows the journal as a listener: at most one model call is in flight at a time.
    """

    open: dict[str, events.CostReserved] = field(default_factory=dict)

    def __call__(self, event: events.Event) -> None:
        record = events.decode(event)
        if isinstance(record, events.CostReserved):
            self.open[record.operation_id] = record
        elif isinstance(record, (events.CostDebited, events.CostReleased)):
            self.open.pop(record.operation_id, None)

    def pending(self) -> list[tuple[str, ledger.Charge]]:
        """Each open reservation's operation and its reserved charge."""
        return [
            (operation, ledger.Charge(reserved.api, reserved.instance))
            for operation, reserved in self.open.items()
        ]
