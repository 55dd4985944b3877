"""A being on the default local model, through `singularity brama serve`, as `make run` does.

The default tier lives one cycle of one model round of at most 64 tokens (a call of a
being's tool takes about 40), told something worth keeping: the answer must be a valid
call of one of the being's own tools, with arguments that carry what it was told, and the
tool must succeed. That life (`default_model.ONE_CYCLE`) is started with the session,
beside the other tests (`tests/conftest.py`); its test asserts on what it saved. It is the default tier's one request to the default model. The slow
tier lives three whole cycles with no prompting at all. The first request evaluates the
whole prompt (~1,750 tokens: the tools, the sanctum): about half a minute on an idle
2-core machine, many minutes on a busy one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from singularity.gateway_server.model_catalogue import DEFAULT_MODEL, MODELS
from tests.support.default_model import calls, live


def test_the_default_model_is_a_named_pinned_model() -> None:
    assert MODELS[DEFAULT_MODEL].title.startswith("Qwen2.5-Coder-1.5B-Instruct")


@pytest.mark.timeout(1800)
def test_one_cycle_on_the_default_model_calls_a_tool_of_the_being_sensibly(
    one_cycle_on_the_default_model: dict[str, Any],
) -> None:
    # Lived from the session's start, beside the other tests (conftest.py): `ONE_CYCLE`.
    [(name, arguments, result)] = calls(one_cycle_on_the_default_model)
    assert name.startswith("singularity_"), name
    assert result["status"] == "success", (name, arguments, result)
    assert "maria" in json.dumps(arguments).lower(), (name, arguments)


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_three_cycles_on_the_default_model_use_the_beings_tools(
    default_gateway: str, tmp_path: Path
) -> None:
    flags = ("--max-cycles", "3", "--max-tool-rounds", "3", "--max-tokens", "256")
    state = live(default_gateway, tmp_path, *flags)
    made = calls(state)
    assert made, state["conversation"]
    refused = [c for c in made if c[2].get("error_code") in ("invalid_arguments", "unknown_tool")]
    assert refused == []
    assert any(result["status"] == "success" for _, _, result in made), made
