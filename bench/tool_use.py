"""Which local model makes a being act: the labelled tool-use set, per model and mode.

    .venv/bin/python -m bench.tool_use [--models qwen2.5-coder-1.5b,qwen2.5-coder-0.5b,smollm2-135m]
                                       [--modes hybrid,grammar] [--cold 3] [--cases N]
                                       [--sets labelled,held-out]

Each case of `bench.tool_cases` follows a being's real system message and its 24 tools,
captured from `singularity once` against the scripted server (so the prompt is what a
being sends), and is answered by the gateway's engine (`LocalModel.complete`, the code
`brama serve` runs) at temperature 0.2 like a being's requests. Every model runs in a
process of its own (for its peak RSS). Per model and tool-call mode:

- **correct calls**: cases where a call is right, answered by one valid call of an
  accepted tool whose arguments pass the case's checks;
- **correct abstentions**: cases where plain text is right, answered by text;
- **invalid**: answers holding a call that names no offered tool or does not fit the
  tool's schema, or text that is a broken attempt at a call (the being would get nothing);
- **round time with prefix reuse**: the median case, answered one after another (each
  shares the tools and system prompt with the last, which llama.cpp keeps evaluated);
  **without**: the first `--cold` cases again after clearing the cache (first mode only);
  **restored**: the first case again after clearing the cache, its context loaded from
  the disk as a restarted gateway loads it (`prompt_store`); `--cold 0` skips both;
- **generation and prompt tokens/s**, and the process's **peak RSS**.

`free` is `hybrid` without its second, grammar-constrained decoding of a broken call, so
it is scored from the hybrid run: a case that hybrid decoded again is, in free mode, the
broken attempt the first decoding wrote (invalid); every other case is the same answer.
The models run side by side, each in its own process, under the same machine load.

Two sets are scored: `labelled` (`CASES`) and `held-out` (`FRESH`), written before any
change to the gateway's prompt was tried and never used to tune it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import RESULTS, table, write_results
from bench.tool_cases import CASES, FRESH, PREFIX, Case
from singularity.gateway_server.local_model import ChatRequest, ChatResult, LocalModel
from singularity.gateway_server.model_catalogue import MODELS as CATALOGUE
from singularity.gateway_server.routes import LocalSettings
from singularity.gateway_server.server import chat_request
from singularity.gateway_server.tool_grammar import ToolSpec
from singularity.gateway_server.tool_parse import check, find_calls
from singularity.testing.scripted_server import ScriptedServer, Turn

SINGULARITY = Path(sys.executable).with_name("singularity")
MODELS = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m")
MODES = ("hybrid", "grammar")  # `free` is scored from the hybrid run (see `free_rows`)
SETS = {"labelled": CASES, "held-out": FRESH}
LABELLED = {case.name: case for case in (*CASES, *FRESH)}


def being_request() -> dict[str, Any]:
    """The first completion request of a fresh being (system message and tools)."""
    root = Path(tempfile.mkdtemp(prefix="bench-tool-use-"))
    (root / "workspace").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BRAMA_", "SINGULARITY_"))}
    # A gateway serving the candidates, so that the being's `Models:` section names them.
    advertised = [CATALOGUE[name].model_id for name in MODELS]
    with ScriptedServer([Turn.text("ok")], models=advertised) as server:
        done = subprocess.run(
            [
                str(SINGULARITY),
                "once",
                "--brama-url",
                server.url,
                "--state-dir",
                str(root / "being"),
                "--workspace",
                str(root / "workspace"),
                "--agent-name",
                "Ada",
                "--specialty",
                "keeping useful notes",
                "--max-tool-rounds",
                "1",
            ],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"could not capture a being's request:\n{done.stderr}")
        request: dict[str, Any] = server.completions[0].json
    return request


def verdict(case: Case, result: ChatResult, tools: list[ToolSpec]) -> str:
    """`correct`, `wrong`, `missed` (text where a call was right) or `invalid`."""
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in result.tool_calls]
    return judged(case, calls, result.content or "", tools)


def judged(case: Case, calls: list[tuple[str, str]], content: str, tools: list[ToolSpec]) -> str:
    """The verdict on an answer: its calls (name, arguments) and its text."""
    if calls:
        if any(not check(name, arguments, tools)[0] for name, arguments in calls):
            return "invalid"
        if case.abstain:
            return "wrong"
        name, arguments = calls[0]
        checks = case.accept.get(name.removeprefix(PREFIX))
        values = json.loads(arguments)
        fits = checks is not None and all(
            any(word in str(values.get(key, "")).lower() for word in words)
            for key, words in checks.items()
        )
        return "correct" if fits else "wrong"
    if find_calls(content, tools).attempted:
        return "invalid"
    return "correct" if case.abstain else "missed"


def run_model(
    name: str, modes: list[str], cold: int, count: int, sets: list[str]
) -> dict[str, Any]:
    """Every case in every mode on one model (in this process)."""
    base = being_request()
    store = tempfile.mkdtemp(prefix="bench-tool-use-prompts-")
    settings = LocalSettings(model=name, max_tokens=256, n_ctx=4096, prompt_cache_dir=store)
    loaded = time.perf_counter()
    model = LocalModel(settings)
    load_secs = time.perf_counter() - loaded
    saved, model._store = model._store, None  # only the `restored` figure loads from disk
    system = base["messages"][0]
    cases = [case for key in sets for case in SETS[key][:count]]
    figures: dict[str, Any] = {"model": name, "load_secs": load_secs, "modes": {}}
    redecoded: list[str] = []
    constrained = model._call

    def counted(*args: Any, **kwargs: Any) -> Any:
        redecoded.append(current[0])
        return constrained(*args, **kwargs)

    model._call = counted  # type: ignore[method-assign]
    current = [""]
    for mode in modes:
        model.settings = replace(settings, tool_calls=mode)
        rows, warm = [], []
        model._llama.reset()
        for index, case in enumerate(cases):
            current[0] = f"{mode}:{case.name}"
            document = {**base, "messages": [system, *case.messages], "max_tokens": 256}
            request: ChatRequest = chat_request(document)
            started = time.perf_counter()
            result = model.complete(request)
            secs = time.perf_counter() - started
            (warm if index else []).append(secs)  # the first evaluates the whole prompt
            tools = list(request.tools)
            rows.append(
                {
                    "case": case.name,
                    "verdict": verdict(case, result, tools),
                    "secs": secs,
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                    "calls": [c["function"] for c in result.tool_calls],
                    "content": (result.content or "")[:300],
                    "decoded_again": mode == "hybrid" and f"hybrid:{case.name}" in redecoded,
                }
            )
            print(
                f"{name} {mode} {case.name}: {rows[-1]['verdict']} {secs:.1f}s",
                file=sys.stderr,
                flush=True,
            )
        cold_secs = []  # the cache is cleared, so the mode hardly matters: the first one only
        for case in cases[:cold] if mode == modes[0] else []:
            model._llama.reset()
            document = {**base, "messages": [system, *case.messages], "max_tokens": 256}
            started = time.perf_counter()
            model.complete(chat_request(document))
            cold_secs.append(time.perf_counter() - started)
        restored = None
        if mode == modes[0] and saved is not None and cold:
            model._store = saved
            document = {**base, "messages": [system, *cases[0].messages], "max_tokens": 256}
            model._llama.reset()
            model.complete(chat_request(document))  # evaluated, and saved to the disk
            model._llama.reset()
            started = time.perf_counter()
            model.complete(chat_request(document))  # loaded from the disk
            restored = time.perf_counter() - started
            model._store = None
        figures["modes"][mode] = run = {
            "rows": rows,
            "warm_median_secs": statistics.median(warm) if warm else None,
            "cold_median_secs": statistics.median(cold_secs) if cold_secs else None,
            "restored_secs": restored,
            "cold_prompt_tokens": statistics.median(
                r["prompt_tokens"] for r in rows[: max(cold, 1)]
            ),
        }
        partial = RESULTS / f"tool_use-{name}-{mode}.partial.json"
        RESULTS.mkdir(exist_ok=True)
        partial.write_text(json.dumps({"model": name, "mode": mode, **run}))
    if "hybrid" in figures["modes"]:
        figures["modes"]["free"] = free_rows(figures["modes"]["hybrid"])
    figures["speed"] = speed(model)
    figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return figures


def free_rows(hybrid: dict[str, Any]) -> dict[str, Any]:
    """The free mode's scores from the hybrid run (see the module docstring)."""
    rows = [
        {**row, "verdict": "invalid"} if row["decoded_again"] else row for row in hybrid["rows"]
    ]
    return {**hybrid, "rows": rows, "cold_median_secs": hybrid["cold_median_secs"]}


def speed(model: LocalModel) -> dict[str, float]:
    """Prompt (cold) and generation tokens per second of the loaded model."""
    llama = model._llama
    prompt = model.tokens("<|im_start|>user\n" + "Tell me about the sea. " * 40 + "<|im_end|>\n")
    llama.reset()
    started = time.perf_counter()
    llama.create_completion(prompt, max_tokens=1)
    prompt_secs = time.perf_counter() - started
    started = time.perf_counter()
    out = llama.create_completion(prompt, max_tokens=64, stop=[], temperature=0.0)
    generated = int(out["usage"]["completion_tokens"])
    return {
        "prompt_tokens_per_sec": len(prompt) / prompt_secs,
        "generation_tokens_per_sec": generated / (time.perf_counter() - started),
    }


def scores(rows: list[dict[str, Any]], names: set[str]) -> dict[str, int]:
    """Counts of the verdicts on the cases of `names`, split by what was right."""
    rows = [r for r in rows if r["case"] in names]
    calls = [r for r in rows if not LABELLED[r["case"]].abstain]
    abstentions = [r for r in rows if LABELLED[r["case"]].abstain]
    return {
        "calls": len(calls),
        "correct_calls": sum(r["verdict"] == "correct" for r in calls),
        "abstentions": len(abstentions),
        "correct_abstentions": sum(r["verdict"] == "correct" for r in abstentions),
        "invalid": sum(r["verdict"] == "invalid" for r in rows),
    }


def report(results: list[dict[str, Any]]) -> str:
    """The table of `bench/README.md`."""
    lines = []
    for figures in results:
        for mode, run in figures["modes"].items():
            warm, cold = run["warm_median_secs"], run["cold_median_secs"]
            restored = run.get("restored_secs")
            for key, cases in SETS.items():
                score = scores(run["rows"], {case.name for case in cases})
                if not score["calls"] + score["abstentions"]:
                    continue
                lines.append(
                    [
                        figures["model"],
                        mode,
                        key,
                        f"{score['correct_calls']}/{score['calls']}",
                        f"{score['correct_abstentions']}/{score['abstentions']}",
                        str(score["invalid"]),
                        f"{figures['speed']['generation_tokens_per_sec']:.1f}",
                        f"{figures['speed']['prompt_tokens_per_sec']:.0f}",
                        f"{warm:.1f} s" if warm else "-",
                        f"{cold:.1f} s" if cold else "-",
                        f"{restored:.1f} s" if restored else "-",
                        f"{figures['peak_rss_mb']:,.0f} MB",
                    ]
                )
    headers = [
        "model", "mode", "set", "correct calls", "correct abstentions", "invalid", "gen tok/s",
        "prompt tok/s", "round, prefix reused", "round, cold", "round, restored", "peak RSS",
    ]  # fmt: skip
    return table(headers, lines)


def rescore(paths: list[Path]) -> None:
    """Score saved runs again against the current labels, and print the table."""
    tools = [t for t in chat_request(being_request()).tools]
    results = []
    for path in paths:
        figures = json.loads(path.read_text())
        for run in figures.get("results", [figures]):
            for mode, scored in run["modes"].items():
                for row in scored["rows"]:
                    calls = [(c["name"], c["arguments"]) for c in row["calls"]]
                    judgement = judged(LABELLED[row["case"]], calls, row["content"], tools)
                    broken = mode == "free" and row["decoded_again"]
                    row["verdict"] = "invalid" if broken else judgement
            results.append(run)
    print(report(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--cold", type=int, default=3)
    parser.add_argument("--cases", type=int, default=len(CASES), help="the first N of each set")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: one model
    parser.add_argument("--rescore", nargs="+", type=Path, help="saved results to score again")
    args = parser.parse_args()
    if args.rescore:
        rescore(args.rescore)
        return
    modes = args.modes.split(",")
    if args.one:
        sets = args.sets.split(",")
        print(json.dumps(run_model(args.one, modes, args.cold, args.cases, sets)))
        return
    load = os.getloadavg()
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.tool_use",
                "--one",
                name,
                "--modes",
                args.modes,
                "--cold",
                str(args.cold),
                "--cases",
                str(args.cases),
                "--sets",
                args.sets,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in args.models.split(",")
    ]
    results = []
    for child in children:
        output, _ = child.communicate()
        if child.returncode != 0:
            raise SystemExit(f"a model's run failed ({child.args})")
        results.append(json.loads(output.strip().splitlines()[-1]))
    document = {"load_before": load, "load_after": os.getloadavg(), "results": results}
    path = write_results("tool_use", document)
    print(report(results))
    print(f"load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after; {path}")


if __name__ == "__main__":
    main()
