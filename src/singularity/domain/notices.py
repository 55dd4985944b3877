"""What the runtime tells its watchers (the terminal, JSON logs) but never journals.

A notice is an event-shaped dict whose `type` no journal line ever has; it carries what
a person watching a being wants to see live and what `activity.jsonl` has no room for:
that a model call has begun, what the being said, what a tool answered.
"""

from __future__ import annotations

from typing import Any

Notice = dict[str, Any]
MODEL_CALL_STARTED = "model_call_started"
MODEL_ANSWERED = "model_answered"
TOOL_ANSWERED = "tool_answered"
NOTICE_TYPES = frozenset({MODEL_CALL_STARTED, MODEL_ANSWERED, TOOL_ANSWERED})


def model_call_started(at: str, cycle: int, model: str) -> Notice:
    """A model call was sent; `model` is the being's current model (or selector)."""
    return {"type": MODEL_CALL_STARTED, "at": at, "cycle": cycle, "model": model}


def model_answered(at: str, cycle: int, model: str, content: str) -> Notice:
    """The model answered; `model` is the one that did, `content` what the being said."""
    return {"type": MODEL_ANSWERED, "at": at, "cycle": cycle, "model": model, "content": content}


def tool_answered(at: str, cycle: int, tool: str, status: str, content: str) -> Notice:
    """A tool call finished; `content` is the tool message as the saved conversation holds it."""
    return {
        "type": TOOL_ANSWERED,
        "at": at,
        "cycle": cycle,
        "tool": tool,
        "status": status,
        "content": content,
    }
