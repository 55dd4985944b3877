"""The `Models:` prompt section: what `singularity_self_switch_model` may switch to.

The switch tool's description is fixed by the spec and names no model, so a being would
otherwise guess (or make a child when asked to switch). The section lists the selectors the
gateway resolves itself and the models it advertised before the first cycle. It is read
once, so it never changes in a life, and stands last among the extension sections, right
before the newest memories (decision 29).
"""

from __future__ import annotations

from typing import Final

from singularity.domain.mind import MAX_MODEL_BYTES
from singularity.errors import UpstreamError
from singularity.sanctum.fitting import json_size
from singularity.tools.extension import Extension
from singularity.tools.model_tool import SWITCH_MODEL, ModelLister

SECTION_HEADER: Final = "\n\nModels:\n"
LISTED: Final = 12
"""At most this many advertised models are named (a large gateway advertises hundreds)."""
MENU_BYTES: Final = 384
"""The section's bound, in the JSON bytes of the system message (names that would pass it
are counted, not named)."""
SELECTORS_LINE: Final = (
    f"- To change your model, call {SWITCH_MODEL.name} with a selector the gateway resolves"
    " (any, best, any-vision-capable, task:<name> such as task:code)"
)


def menu_text(models: list[str]) -> str:
    """The section for the advertised `models` (without unusable ids), within `MENU_BYTES`."""
    usable = [
        model
        for model in models
        if model.isprintable() and 0 < len(model.encode()) <= MAX_MODEL_BYTES
    ]
    for count in range(min(len(usable), LISTED), 0, -1):
        more = len(usable) - count
        tail = f" and {more} more" if more else ""
        named = f"{SECTION_HEADER}{SELECTORS_LINE} or a model it serves: "
        named += f"{', '.join(usable[:count])}{tail}."
        if json_size(named) <= MENU_BYTES:
            return named
    if usable:
        return f"{SECTION_HEADER}{SELECTORS_LINE} or one of the {len(usable)} models it serves."
    return f"{SECTION_HEADER}{SELECTORS_LINE}."


class ModelMenu(Extension):
    """The `Models:` section, read from the gateway's model list once, before the first
    cycle this process lives (a being too poor to live one asks the gateway nothing)."""

    def __init__(self, list_models: ModelLister) -> None:
        self._list_models = list_models
        self._text = menu_text([])
        self._read = False

    async def before_cycle(self) -> None:
        """The first time: read the advertised models (unreachable: the selectors alone)."""
        if self._read:
            return
        self._read = True
        try:
            self._text = menu_text(await self._list_models())
        except UpstreamError:
            self._text = menu_text([])

    def prompt_section(self) -> str:
        """The section, the same in every round once read."""
        return self._text
