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


def cost_reserved(at: str, cycle: int, operation_id: str, api: Decimal, instance: Decimal) -> Event:
    """The worst-case cost of a model call was reserved before the call (decision 16)."""
    return {
        "type": "cost_reserved",
        "at": at,
        "cycle": cycle,
        "operation_id": operation_id,
        "api": render_money(api),
        "instance": render_money(instance),
    }


def cost_released(at: str, cycle: int, operation_id: str) -> Event:
    """A reserved model call failed and cost nothing."""
    return {"type": "cost_released", "at": at, "cycle": cycle, "operation_id": operation_id}


def cost_debited(
    at: str, cycle: int, operation_id: str, api: Decimal, instance: Decimal, tokens: int
) -> Event:
    """A completion's cost was debited; the spec's fields first, then the operation's parts."""
    return {
        "type": "cost_debited",
        "at": at,
        "cycle": cycle,
        "amount": render_money(api + instance),
        "operation_id": operation_id,
        "api": render_money(api),
        "instance": render_money(instance),
        "tokens": tokens,
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


def child_funded(
    at: str, cycle: int, operation_id: str, child_id: str, amount: Decimal, record: dict[str, str]
) -> Event:
    """Funds moved from the parent to a new child (decision 17); `record` restores its record."""
    return {
        "type": "child_funded",
        "at": at,
        "cycle": cycle,
        "operation_id": operation_id,
        "child_id": child_id,
        "amount": render_money(amount),
        "record": record,
    }


def child_refunded(at: str, cycle: int, operation_id: str, child_id: str, amount: Decimal) -> Event:
    """Funds of a child that never started came back to the parent."""
    return {
        "type": "child_refunded",
        "at": at,
        "cycle": cycle,
        "operation_id": operation_id,
        "child_id": child_id,
        "amount": render_money(amount),
    }


def sanctum_initialized(at: str, outcome: str, filled: list[str]) -> Event:
    """The sanctum was checked at boot: `created`, `finished` (files filled in) or `born`."""
    return {"type": "sanctum_initialized", "at": at, "outcome": outcome, "filled": filled}


def sanctum_written(at: str, cycle: int, path: str, size: int) -> Event:
    """A sanctum tool wrote a file (sanctum-relative path, bytes written)."""
    return {"type": "sanctum_written", "at": at, "cycle": cycle, "path": path, "bytes": size}


def sanctum_merged(at: str, cycle: int, keep: str, drop: str) -> Event:
    """Two sanctum files became one: `keep` holds the merged text, `drop` was removed."""
    return {"type": "sanctum_merged", "at": at, "cycle": cycle, "keep": keep, "drop": drop}


def sanctum_tended(at: str, cycle: int, day: str, counts: dict[str, Any]) -> Event:
    """The being stamped a tending pass; the counts the map showed."""
    return {"type": "sanctum_tended", "at": at, "cycle": cycle, "date": day, "counts": counts}


def session_note_auto(at: str, cycle: int, path: str) -> Event:
    """The runtime wrote a session note for a cycle that ended without one."""
    return {"type": "session_note_auto", "at": at, "cycle": cycle, "path": path}


def pulse_started(at: str, cycle: int, max_rounds: int, max_cost: Decimal) -> Event:
    """A pulse (a scheduled quiet cycle) begins; `cycle` is the cycle it will live."""
    return {
        "type": "pulse_started",
        "at": at,
        "cycle": cycle,
        "max_rounds": max_rounds,
        "max_cost": render_money(max_cost),
    }


def pulse_finished(at: str, cycle: int, status: str, cost: Decimal) -> Event:
    """A pulse ended: its cycle status, or `cost_cap` / `round_cap`, and what it cost."""
    return {
        "type": "pulse_finished",
        "at": at,
        "cycle": cycle,
        "status": status,
        "cost": render_money(cost),
    }


def journal_entry_added(
    at: str, cycle: int, entry_id: str, mood: str | None, redacted: bool
) -> Event:
    """A private journal entry was stored (its text never appears here)."""
    return {
        "type": "journal_entry_added",
        "at": at,
        "cycle": cycle,
        "id": entry_id,
        "mood": mood,
        "redacted": redacted,
    }


def journal_recalled(at: str, cycle: int, k: int, ids: list[str]) -> Event:
    """The being recalled journal entries: how many it asked for and which it got."""
    return {"type": "journal_recalled", "at": at, "cycle": cycle, "k": k, "ids": ids}


def journal_promoted(at: str, cycle: int, entry_id: str, target: str, ref: str) -> Event:
    """A summary of a journal entry went public under `ref`."""
    return {
        "type": "journal_promoted",
        "at": at,
        "cycle": cycle,
        "id": entry_id,
        "target": target,
        "ref": ref,
    }


def journal_purged(at: str, cycle: int, count: int) -> Event:
    """Entries older than the retention window were deleted."""
    return {"type": "journal_purged", "at": at, "cycle": cycle, "count": count}
