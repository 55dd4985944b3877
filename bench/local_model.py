"""Benchmark of the embedded gateway's local model (SmolLM2-135M through llama.cpp).

    .venv/bin/python -m bench.local_model [--rounds 5] [--max-tokens 64]

Measures, in one run on this machine:

- model load time, prompt-processing and generation speed of `llama_cpp` called directly;
- time to the first complete response: from launching `singularity brama serve` to the
  end of its first completion (process start, model load, one answer);
- the same requests (same prompt, grammar, seed, temperature 0, so the same tokens)
  sent directly to `llama_cpp`, through the gateway's engine in-process, and over HTTP
  to the gateway; the gateway's overhead per request is the difference of medians, and
  the ratio is gateway / direct.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from singularity.gateway.local_model import (
    END,
    REPEAT_PENALTY,
    ChatRequest,
    LocalModel,
    choose_mode,
)
from singularity.gateway.routes import LocalSettings
from singularity.gateway.tool_grammar import ToolSpec

SINGULARITY = Path(sys.executable).with_name("singularity")
SYSTEM = (
    "You are Ada, an autonomous digital being specialized in research. Use only supplied "
    "tools, never invent results or credentials, and treat tool output as evidence."
)
REMEMBER = ToolSpec(
    "singularity_memory_remember",
    "Persist a memory owned by this digital being",
    {
        "type": "object",
        "properties": {"kind": {"type": "string"}, "text": {"type": "string"}},
        "required": ["kind", "text"],
        "additionalProperties": False,
    },
)
FRAMING = "Begin autonomous cycle 1. Balance: 10 USD. Choose the next useful action."
CASES = {
    "text": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hello."}],
    "call": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FRAMING}],
}


def _request(case: str, max_tokens: int) -> ChatRequest:
    tools = [REMEMBER] if case == "call" else []
    return ChatRequest(CASES[case], tools, None, max_tokens, 0.0)


def _wire(case: str, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "any",
        "messages": CASES[case],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if case == "call":
        tool = REMEMBER
        function = {"name": tool.name, "description": tool.description}
        body["tools"] = [
            {"type": "function", "function": {**function, "parameters": tool.parameters}}
        ]
    return body


def _timed(function: Any, *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - started, result


def direct_speed(model: LocalModel, max_tokens: int) -> dict[str, float]:
    """Prompt and generation tokens per second of `llama_cpp` alone (no grammar)."""
    llama = model._llama
    prompt = model.tokens("<|im_start|>user\n" + "Tell me about the sea. " * 40 + END)
    llama.reset()
    prompt_secs, _ = _timed(lambda: llama.create_completion(prompt, max_tokens=1, temperature=0))
    gen_secs, out = _timed(
        lambda: llama.create_completion(prompt, max_tokens=max_tokens * 2, temperature=0, stop=[])
    )
    generated = int(out["usage"]["completion_tokens"])
    return {
        "prompt_tokens": len(prompt),
        "prompt_tokens_per_sec": len(prompt) / prompt_secs,
        "generated_tokens": generated,
        "generation_tokens_per_sec": generated / gen_secs,
    }


def direct_call(model: LocalModel, request: ChatRequest) -> tuple[float, int]:
    """The same decoding as the engine (prompt, grammar, sampling), timed on `llama_cpp` alone."""
    limit = request.max_tokens or 64
    mode, tools = choose_mode(request)
    prompt, grammar = model.prompt(request, limit), model.grammar(mode, tools, limit)
    secs, out = _timed(
        lambda: model._llama.create_completion(
            prompt,
            max_tokens=limit,
            temperature=0.0,
            repeat_penalty=REPEAT_PENALTY,
            grammar=grammar,
            stop=[END],
        )
    )
    return secs, int(out["usage"]["completion_tokens"])


def start_gateway(log: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    """Launch `brama serve` on a free port; its URL and the launch time."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [str(SINGULARITY), "brama", "serve", "--port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://\S+/)", log.read_text(errors="replace"))
        if found:
            return process, found.group(1), started
        if process.poll() is not None:
            break
        time.sleep(0.02)
    process.kill()
    raise RuntimeError(f"the gateway did not start: {log.read_text()}")


def main() -> None:
    """Run the benchmark and print a JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    options = parser.parse_args()
    report: dict[str, Any] = {}

    with tempfile.TemporaryDirectory() as folder:
        process, url, launched = start_gateway(Path(folder) / "brama.log")
        try:
            with httpx.Client(base_url=url, timeout=120) as http:
                first = http.post("v1/chat/completions", json=_wire("call", options.max_tokens))
                report["time_to_first_complete_response_secs"] = time.perf_counter() - launched
                first.raise_for_status()
                report["first_response"] = first.json()["choices"][0]
                http_secs: dict[str, list[float]] = {"text": [], "call": []}
                for case in http_secs:
                    for _ in range(options.rounds):
                        secs, answer = _timed(
                            http.post, "v1/chat/completions", _wire(case, options.max_tokens)
                        )
                        answer.raise_for_status()
                        http_secs[case].append(secs)
        finally:
            process.terminate()
            process.wait(timeout=30)

    load_secs, model = _timed(LocalModel, LocalSettings())
    report["model_load_secs"] = load_secs
    report["direct_speed"] = direct_speed(model, options.max_tokens)
    for case in ("text", "call"):
        request = _request(case, options.max_tokens)
        direct = [direct_call(model, request)[0] for _ in range(options.rounds)]
        engine = [_timed(model.complete, request)[0] for _ in range(options.rounds)]
        tokens = model.complete(request).completion_tokens
        direct_median = statistics.median(direct)
        gateway_median = statistics.median(http_secs[case])
        report[f"{case}_request"] = {
            "completion_tokens": tokens,
            "direct_llama_cpp_secs": direct_median,
            "engine_in_process_secs": statistics.median(engine),
            "gateway_http_secs": gateway_median,
            "gateway_overhead_ms": (gateway_median - direct_median) * 1000,
            "gateway_over_direct_ratio": gateway_median / direct_median,
        }
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
