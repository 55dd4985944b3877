"""`singularity_self_switch_model` (spec §11.6): choose the model of every later completion."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from singularity.domain.mind import MAX_MODEL_BYTES
from singularity.domain.state import AgentState
from singularity.errors import UpstreamError
from singularity.tools.arguments import required_text
from singularity.tools.base import (
    FunctionTool,
    FunctionToolset,
    Outcome,
    ToolDefinition,
    object_schema,
    string_properties,
)

SELECTORS = ("any", "any-vision-capable", "best")
TASK_PREFIX = "task:"
SWITCH_MODEL = ToolDefinition(
    "singularity_self_switch_model",
    "Switch future cognition calls to another available Brama model",
    object_schema(string_properties("model")),
)
ModelLister = Callable[[], Awaitable[list[str]]]


def is_selector(model: str) -> bool:
    """Whether the gateway resolves this name itself."""
    return model in SELECTORS or model.startswith(TASK_PREFIX)


def switch_model_tools(state: AgentState, list_models: ModelLister) -> FunctionToolset:
    """The model-switch tool over the gateway's model list."""

    async def switch(arguments: dict[str, Any]) -> Outcome:
        model = required_text(arguments, "model", MAX_MODEL_BYTES)
        try:
            advertised = await list_models()
        except UpstreamError as error:
            return Outcome.indeterminate("remote", str(error))
        if not is_selector(model) and model not in advertised:
            return Outcome.failed("model_unavailable", "Brama does not advertise that model")
        state.mind.current_model = model
        return Outcome.success({"model": model})

    return FunctionToolset([FunctionTool(SWITCH_MODEL, switch)])
