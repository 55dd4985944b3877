"""The events `activity.jsonl` records, each built with its fields in the spec's order (§5.5)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from singularity.money import render_money

Event = dict[str, Any]


def started(at: str) -> Event:
    """Boot finished."""
    return {"type": "started", "at": at}


def cycle_started(at: str, cycle: int) -> Event:
    """A cycle began."""
    return {"type": "cycle_started", "at": at, "cycle": cycle}


def model_completed(at: str, cycle: int, prompt_tokens: int, completion_tokens: int) -> Event:
    """A completion arrived; the total is recomputed."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return {"type": "model_completed", "at": at, "cycle": cycle, "usage": usage}


def cost_debited(at: str, cycle: int, amount: Decimal, operation_id: str) -> Event:
    """A completion's cost was debited; the operation id makes the debit idempotent."""
    return {
        "type": "cost_debited",
        "at": at,
        "cycle": cycle,
        "amount": render_money(amount),
        "operation_id": operation_id,
    }


def tool_finished(at: str, cycle: int, tool: str, status: str) -> Event:
    """A tool call finished."""
    return {"type": "tool_finished", "at": at, "cycle": cycle, "tool": tool, "status": status}


def revenue_credited(at: str, cycle: int, amount: Decimal, source: str) -> Event:
    """Trusted revenue was credited."""
    return {
        "type": "revenue_credited",
        "at": at,
        "cycle": cycle,
        "amount": render_money(amount),
        "source": source,
    }


def mind_imported(
    at: str, source_kind: str, source_id: str, imported: int, attributed: int, unchanged: int
) -> Event:
    """An import was accepted."""
    return {
        "type": "mind_imported",
        "at": at,
        "source_kind": source_kind,
        "source_id": source_id,
        "imported": imported,
        "attributed": attributed,
        "unchanged": unchanged,
    }


def warning(at: str, cycle: int, message: str) -> Event:
    """A tolerated problem."""
    return {"type": "warning", "at": at, "cycle": cycle, "message": message}


def stopped(at: str, cycle: int, status: str) -> Event:
    """The runtime shut down."""
    return {"type": "stopped", "at": at, "cycle": cycle, "status": status}
