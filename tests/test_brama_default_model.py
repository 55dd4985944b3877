"""A being on the default local model, through `singularity brama serve`, as `make run` does.

The default tier lives one cycle of one model round of at most 64 tokens (a call of a
being's tool takes about 40), told something worth keeping: the answer must be a valid
call of one of the being's own tools, with arguments that carry what it was told, and the
tool must succeed. It is the default tier's one request to the default model. The slow
tier lives three whole cycles with no prompting at all. The first request evaluates the
whole prompt (~1,750 tokens: the tools, the sanctum): about half a minute on an idle
2-core machine, many minutes on a busy one.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from singularity.gateway_server.model_catalogue import DEFAULT_MODEL, MODELS
from tests.support.brama import SINGULARITY


def _live(url: str, root: Path, *flags: str) -> dict[str, Any]:
    """Run a being against the gateway; its saved state."""
    state_dir, workspace = root / "being", root / "workspace"
    workspace.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAMA_", "SINGULARITY_"))}
    lived = subprocess.run(
        [
            *(str(SINGULARITY), "run", "--brama-url", url, "--state-dir", str(state_dir)),
            *("--workspace", str(workspace), "--agent-name", "Ada"),
            *("--specialty", "keeping useful notes", "--cycle-interval-secs", "0"),
            *("--http-timeout-secs", "1500"),
            *("--input-price", "0.5", "--output-price", "1.5", "--log-format", "json"),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=2400,
        env=env,
        cwd=root,
        check=False,
    )
    assert lived.returncode == 0, lived.stderr
    verified = subprocess.run(
        [str(SINGULARITY), "verify", str(state_dir)], capture_output=True, text=True, check=False
    )
    assert (verified.returncode, verified.stdout.strip()) == (0, f"{state_dir}: ok"), verified
    state: dict[str, Any] = json.loads((state_dir / "state.json").read_text())
    return state


def _calls(state: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(tool, arguments, result) of every call the being made, in order."""
    results = {
        m["tool_call_id"]: json.loads(m["content"])
        for m in state["conversation"]
        if m["role"] == "tool"
    }
    return [
        (call["function"]["name"], json.loads(call["function"]["arguments"]), results[call["id"]])
        for message in state["conversation"]
        for call in message.get("tool_calls") or []
    ]


def test_the_default_model_is_a_named_pinned_model() -> None:
    assert MODELS[DEFAULT_MODEL].title.startswith("Qwen2.5-Coder-1.5B-Instruct")


@pytest.mark.timeout(1800)
def test_one_cycle_on_the_default_model_calls_a_tool_of_the_being_sensibly(
    default_gateway: str, tmp_path: Path
) -> None:
    state = _live(
        default_gateway,
        tmp_path,
        *("--max-cycles", "1", "--max-tool-rounds", "1", "--max-tokens", "64"),
        *("--stimulus", "The operator's name is Maria. Remember her name for later cycles."),
    )
    [(name, arguments, result)] = _calls(state)
    assert name.startswith("singularity_"), name
    assert result["status"] == "success", (name, arguments, result)
    assert "maria" in json.dumps(arguments).lower(), (name, arguments)


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_three_cycles_on_the_default_model_use_the_beings_tools(
    default_gateway: str, tmp_path: Path
) -> None:
    flags = ("--max-cycles", "3", "--max-tool-rounds", "3", "--max-tokens", "256")
    state = _live(default_gateway, tmp_path, *flags)
    calls = _calls(state)
    assert calls, state["conversation"]
    refused = [c for c in calls if c[2].get("error_code") in ("invalid_arguments", "unknown_tool")]
    assert refused == []
    assert any(result["status"] == "success" for _, _, result in calls), calls
