"""`singularity_self_switch_model` (spec §11.6): choose the model of every later completion."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from singularity.domain.mind import MAX_MODEL_BYTES
from singularity.domain.state import AgentState
from singularity.errors import UpstreamError
from singularity.tools.arguments import Text
from singularity.tools.base import FunctionToolset, Outcome
from singularity.tools.typed import tool, toolset

SELECTORS = ("any", "any-vision-capable", "best")
TASK_PREFIX = "task:"
ModelLister = Callable[[], Awaitable[list[str]]]


def is_selector(model: str) -> bool:
    """Whether the gateway resolves this name itself."""
    return model in SELECTORS or model.startswith(TASK_PREFIX)


@dataclass(frozen=True)
class ModelChoice:
    """What the model switch needs: the being, and the gateway's list of models."""

    state: AgentState
    list_models: ModelLister


@tool(
    "singularity_self_switch_model",
    "Switch future cognition calls to another available Brama model",
)
async def switch_model(
    choice: ModelChoice, *, model: Annotated[str, Text(MAX_MODEL_BYTES)]
) -> Outcome:
    try:
        advertised = await choice.list_models()
    except UpstreamError as error:
        return Outcome.indeterminate("remote", str(error))
    if not is_selector(model) and model not in advertised:
        return Outcome.failed("model_unavailable", "Brama does not advertise that model")
    choice.state.mind.current_model = model
    return Outcome.success({"model": model})


SWITCH_MODEL = switch_model.definition


def switch_model_tools(state: AgentState, list_models: ModelLister) -> FunctionToolset:
    """The model-switch tool over the gateway's model list."""
    return toolset(ModelChoice(state, list_models), [switch_model])
