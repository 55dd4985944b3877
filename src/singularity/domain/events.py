"""The events `activity.jsonl` records, each built with its fields in the spec's order (§5.5)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from singularity.money import add, render_money

Event = dict[str, Any]


def started(at: str) -> Event:
    """Boot finished."""
    return {"type": "started", "at": at}


def cycle_started(at: str, cycle: int) -> Event:
    """A cycle began."""
    return {"type": "cycle_started", "at": at, "cycle": cycle}


def model_completed(
    at: str, cycle: int, prompt_tokens: int, completion_tokens: int, model: str | None = None
) -> Event:
    """A completion arrived; the total is recomputed; `model` is the one that answered."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    event: Event = {"type": "model_completed", "at": at, "cycle": cycle, "usage": usage}
    if model is not None:
        event["model"] = model
    return event


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
        "amount": render_money(add(api, instance)),
        "operation_id": operation_id,
        "api": render_money(api),
        "instance": render_money(instance),
        "tokens": tokens,
    }


def tool_finished(at: str, cycle: int, tool: str, status: str) -> Event:
    """A tool call finished."""
    return {"type": "tool_finished", "at": at, "cycle": cycle, "tool": tool, "status": status}


def output_bounded(
    at: str,
    cycle: int,
    tool: str,
    mode: str,
    rejection: str | None,
    redactions: dict[str, int],
) -> Event:
    """A tool result was withheld (`rejection`) or passed with values replaced; journaled
    just before its `tool_finished`, so a reader knows what the model was shown."""
    return {
        "type": "output_bounded",
        "at": at,
        "cycle": cycle,
        "tool": tool,
        "mode": mode,
        "rejection": rejection,
        "redactions": redactions,
    }


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


def journal_recovered(
    at: str,
    cycle: int,
    reason: str,
    set_aside: str | None,
    kept: int,
    lost: int,
    unreachable: bool,
) -> Event:
    """The journal could not be read as it was: what was set aside, kept and lost (no text).

    `reason` is `key_lost` (a fresh journal starts; the old one is crypto-shredded),
    `foreign` (the database belonged to another journal) or `damaged` (salvaged).
    """
    return {
        "type": "journal_recovered",
        "at": at,
        "cycle": cycle,
        "reason": reason,
        "set_aside": set_aside,
        "kept": kept,
        "lost": lost,
        "unreachable": unreachable,
    }


def cycle_finished(at: str, cycle: int, status: str) -> Event:
    """A cycle ended: `completed`, `tool_round_limit`, `budget_exhausted` or `cancelled`."""
    return {"type": "cycle_finished", "at": at, "cycle": cycle, "status": status}


def operator_message(at: str, cycle: int, request_id: str, size: int) -> Event:
    """An operator's message reached the being in this cycle (its text is in the conversation)."""
    return {
        "type": "operator_message",
        "at": at,
        "cycle": cycle,
        "request_id": request_id,
        "bytes": size,
    }


def operator_paused(at: str, cycle: int, request_id: str, effect: str) -> Event:
    """The operator paused the being (`effect`: `paused` or `already paused`)."""
    return {
        "type": "operator_paused",
        "at": at,
        "cycle": cycle,
        "request_id": request_id,
        "effect": effect,
    }


def operator_resumed(at: str, cycle: int, request_id: str, effect: str) -> Event:
    """The operator resumed the being (`effect`: `resumed` or `was not paused`)."""
    return {
        "type": "operator_resumed",
        "at": at,
        "cycle": cycle,
        "request_id": request_id,
        "effect": effect,
    }


def operator_stopped(at: str, cycle: int, request_id: str, effect: str) -> Event:
    """The operator stopped the being (`effect`: `stopping`, or why it was ignored)."""
    return {
        "type": "operator_stopped",
        "at": at,
        "cycle": cycle,
        "request_id": request_id,
        "effect": effect,
    }


def operator_credited(
    at: str, cycle: int, operation_id: str, request_id: str, amount: Decimal, note: str
) -> Event:
    """The operator added funds: a trusted ledger entry that is never revenue."""
    return {
        "type": "operator_credited",
        "at": at,
        "cycle": cycle,
        "amount": render_money(amount),
        "operation_id": operation_id,
        "request_id": request_id,
        "note": note,
    }


def operator_sanctum_written(
    at: str, cycle: int, request_id: str, path: str, size: int, before: str | None, after: str
) -> Event:
    """The operator wrote a sanctum file: its path, size and SHA-256 before and after."""
    return {
        "type": "operator_sanctum_written",
        "at": at,
        "cycle": cycle,
        "request_id": request_id,
        "path": path,
        "bytes": size,
        "sha256_before": before,
        "sha256_after": after,
    }


def operator_request_refused(at: str, cycle: int, request_id: str, kind: str, reason: str) -> Event:
    """An operator request could not be applied; nothing changed."""
    return {
        "type": "operator_request_refused",
        "at": at,
        "cycle": cycle,
        "request_id": request_id,
        "kind": kind,
        "reason": reason,
    }


def self_edit_proposed(at: str, cycle: int, proposal_id: str, tool: str, text: str) -> Event:
    """Under review, the being proposed a change to its prompt, rules or learnings."""
    return {
        "type": "self_edit_proposed",
        "at": at,
        "cycle": cycle,
        "proposal_id": proposal_id,
        "tool": tool,
        "text": text,
    }


def self_edit_decided(
    at: str, cycle: int, request_id: str, proposal_id: str, decision: str
) -> Event:
    """The operator approved (applied) or refused a proposed self-edit."""
    return {
        "type": "self_edit_decided",
        "at": at,
        "cycle": cycle,
        "request_id": request_id,
        "proposal_id": proposal_id,
        "decision": decision,
    }
