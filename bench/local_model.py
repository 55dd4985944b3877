"""The embedded gateway's local model (SmolLM2-135M through llama.cpp): speed and overhead.

    .venv/bin/python -m bench.local_model [--rounds 10] [--max-tokens 48] [--threads N]

Measured in one run:

- **speed** of `llama_cpp` called directly: prompt evaluation (cold cache) and generation,
  tokens per second, at the gateway's thread count;
- **time to the first complete response**: from launching `singularity brama serve` to
  the end of its first completion (process start, model load, one answer, cold cache);
- **gateway overhead**: the same requests (same prompt, grammar, sampling, temperature 0,
  hence the same tokens) answered by `llama_cpp` called directly in this process and by
  the gateway over HTTP, interleaved round by round. The overhead is the difference of
  the medians; the ratio is gateway ÷ direct. The gateway's engine called in this
  process (`LocalModel.complete`: rendering, grammar, policy) splits the overhead into
  engine and HTTP. Each side sees the same request sequence, so caches match.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import machine, table, write_results
from singularity.gateway_server.chat_prompt import CALL_OPEN, END
from singularity.gateway_server.local_model import (
    REPEAT_PENALTY,
    ChatRequest,
    LocalModel,
    choose_mode,
)
from singularity.gateway_server.routes import LocalSettings
from singularity.gateway_server.tool_grammar import ToolSpec

SINGULARITY = Path(sys.executable).with_name("singularity")
# This bench measures the gateway's overhead on the smallest model, decoding as it did.
SMALL = 'model = "smollm2-135m"\ntool_calls = "grammar"'


def small_settings(threads: int) -> LocalSettings:
    """The engine's settings for this bench: the smallest model, grammar-constrained calls."""
    return LocalSettings(model="smollm2-135m", tool_calls="grammar", threads=threads)


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
RESULT = '{"status":"success","result":{"memory_id":"7d1c"}}'
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": REMEMBER.name, "arguments": '{"kind":"fact","text":"the sky is blue"}'},
}
CASES: dict[str, list[dict[str, Any]]] = {
    "call": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": FRAMING}],
    "text": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": FRAMING},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
    ],
}


def _wire(case: str, max_tokens: int) -> dict[str, Any]:
    function = {"name": REMEMBER.name, "description": REMEMBER.description}
    return {
        "model": "any",
        "messages": CASES[case],
        "max_tokens": max_tokens,
        "temperature": 0,
        "tools": [
            {"type": "function", "function": {**function, "parameters": REMEMBER.parameters}}
        ],
    }


def _timed(function: Any, *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - started, result


def speed(model: LocalModel, max_tokens: int) -> dict[str, float]:
    """Prompt and generation tokens per second of `llama_cpp` alone (cold cache, no grammar)."""
    llama = model._llama
    prompt = model.tokens("<|im_start|>user\n" + "Tell me about the sea. " * 60 + END)
    llama.reset()
    prompt_secs, _ = _timed(lambda: llama.create_completion(prompt, max_tokens=1))
    generate = lambda: llama.create_completion(prompt, max_tokens=4 * max_tokens, stop=[])  # noqa: E731
    generation_secs, out = _timed(generate)
    generated = int(out["usage"]["completion_tokens"])
    return {
        "prompt_tokens": len(prompt),
        "prompt_tokens_per_sec": len(prompt) / prompt_secs,
        "generated_tokens": generated,
        "generation_tokens_per_sec": generated / generation_secs,
    }


def direct(model: LocalModel, case: str, max_tokens: int) -> tuple[float, int]:
    """The engine's decoding of this request (prompt, grammar, sampling) on `llama_cpp` alone."""
    request = ChatRequest(CASES[case], [REMEMBER], None, max_tokens, 0.0)
    mode, tools = choose_mode(request, "grammar")
    prompt, grammar = model.prompt(request, max_tokens), model.grammar(mode, tools, max_tokens)
    if mode == "call":  # the engine opens a constrained call with the tag, as here
        prompt += model.tokens(CALL_OPEN)
    secs, out = _timed(
        lambda: model._llama.create_completion(
            prompt,
            max_tokens=max_tokens,
            temperature=0.0,
            repeat_penalty=REPEAT_PENALTY,
            grammar=grammar,
            stop=[END],
        )
    )
    return secs, int(out["usage"]["completion_tokens"])


def through_gateway(http: httpx.Client, case: str, max_tokens: int) -> tuple[float, int]:
    """The same request over HTTP to the gateway."""
    body = _wire(case, max_tokens)
    started = time.perf_counter()
    answer = http.post("v1/chat/completions", json=body)
    secs = time.perf_counter() - started
    answer.raise_for_status()
    return secs, int(answer.json()["usage"]["completion_tokens"])


def interleaved(
    model: LocalModel, http: httpx.Client, case: str, rounds: int, max_tokens: int
) -> dict[str, Any]:
    """Direct and gateway medians for one request, alternating which side goes first."""
    samples: dict[str, list[float]] = {"direct": [], "engine": [], "gateway": []}
    tokens: set[int] = set()
    request = ChatRequest(CASES[case], [REMEMBER], None, max_tokens, 0.0)
    for index in range(rounds + 1):  # round 0 warms both caches
        order = list(samples) if index % 2 else list(reversed(samples))
        for side in order:
            if side == "direct":
                secs, used = direct(model, case, max_tokens)
            elif side == "engine":
                secs, result = _timed(model.complete, request)
                used = result.completion_tokens
            else:
                secs, used = through_gateway(http, case, max_tokens)
            if index:
                samples[side].append(secs)
                tokens.add(used)
    direct_ms = statistics.median(samples["direct"]) * 1000
    gateway_ms = statistics.median(samples["gateway"]) * 1000
    return {
        "completion_tokens": sorted(tokens),
        "direct_median_ms": direct_ms,
        "engine_median_ms": statistics.median(samples["engine"]) * 1000,
        "gateway_median_ms": gateway_ms,
        "overhead_ms": gateway_ms - direct_ms,
        "ratio": gateway_ms / direct_ms,
        "samples_ms": {side: [x * 1000 for x in values] for side, values in samples.items()},
    }


def launch(log: Path, config: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start `brama serve` on a free port; its URL once it listens."""
    command = [str(SINGULARITY), "brama", "serve", "--port", "0", "--config", str(config)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        found = re.search(r"listening on (http://\S+/)", log.read_text(errors="replace"))
        if found:
            return process, found.group(1)
        time.sleep(0.01)
    process.kill()
    raise RuntimeError(f"the gateway did not start: {log.read_text()}")


def measure(rounds: int, max_tokens: int, threads: int, folder: Path) -> dict[str, Any]:
    """Every figure of one run."""
    config = folder / "brama.toml"
    config.write_text(f"[local]\n{SMALL}\nthreads = {threads}\n")
    report: dict[str, Any] = {}
    launched = time.perf_counter()
    process, url = launch(folder / "brama.log", config)
    try:
        with httpx.Client(base_url=url, timeout=600) as http:
            first = http.post("v1/chat/completions", json=_wire("call", max_tokens))
            report["first_response_secs"] = time.perf_counter() - launched
            report["first_response"] = first.json()["choices"][0]
            model = LocalModel(small_settings(threads))
            report["speed"] = speed(model, max_tokens)
            for case in ("call", "text"):
                report[case] = interleaved(model, http, case, rounds, max_tokens)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return report


def render(report: dict[str, Any]) -> str:
    """The tables printed at the end."""
    speed_row = report["speed"]
    lines = [
        f"prompt: {speed_row['prompt_tokens_per_sec']:.0f} tokens/s "
        f"({speed_row['prompt_tokens']} tokens, cold); generation: "
        f"{speed_row['generation_tokens_per_sec']:.1f} tokens/s; time to the first complete "
        f"response from launch: {report['first_response_secs']:.1f} s",
        "",
    ]
    rows = [
        [
            case,
            "/".join(str(t) for t in report[case]["completion_tokens"]),
            f"{report[case]['direct_median_ms']:.0f} ms",
            f"{report[case]['engine_median_ms']:.0f} ms",
            f"{report[case]['gateway_median_ms']:.0f} ms",
            f"{report[case]['overhead_ms']:.1f} ms",
            f"{report[case]['ratio']:.3f}x",
        ]
        for case in ("call", "text")
    ]
    headers = ["request", "tokens", "direct", "engine", "gateway", "overhead", "gateway/direct"]
    return "\n".join(lines) + table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the tables and write the result file."""
    parser = argparse.ArgumentParser(prog="python -m bench.local_model", description=__doc__)
    parser.add_argument("--rounds", type=int, default=10, help="measured requests per case")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=LocalSettings().threads)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="singularity-bench-") as folder:
        environment = machine(Path(folder))
        report = measure(args.rounds, args.max_tokens, args.threads, Path(folder))
    print(render(report))
    path = write_results(
        "local_model",
        {
            "benchmark": "local_model",
            "command": "python -m bench.local_model "
            f"--rounds {args.rounds} --max-tokens {args.max_tokens} --threads {args.threads}",
            "machine": environment,
            "results": report,
        },
    )
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
