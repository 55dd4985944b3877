"""Durable rounds per second: our runtime against LangGraph's agent, side by side.

    .venv/bin/python -m bench.rounds [--rounds 100] [--repeats 3]
                                     [--durability sync,async,exit] [--no-langgraph]

One round is a model round trip to the loopback scripted server (zero think time), one
tool call (`singularity_memory_remember`) and everything persisted for them. The scenario
is `--rounds` tool-call turns, then a text turn that ends the cycle; a run is timed from the
opening user message to the final answer, and rounds per second is `--rounds` over that.
Setup (creating the being, booting) is not timed.

- ours: `Runtime.once()` on a booted being (`max_tool_rounds` above the scenario's), which
  per round journals the reservation, the completion and the debit, runs the tool, journals
  it and saves the state, every append fdatasynced and every save fsynced with its directory;
- LangGraph (`bench/langgraph_rounds.py`, needs the `bench` extra): the prebuilt agent with
  its SQLite checkpointer, with `durability="sync"` (each step's checkpoint committed before
  the next step: the durable comparison), with LangGraph's default `"async"` (committed
  while the next step runs), and with `"exit"` (one checkpoint when the run ends, so not
  durable per step: it shows what LangGraph costs before persistence).

Both run against the same `ScriptedServer` in this process, for a fresh and for a full being
(1000 memories of 16 KiB, a full window of 400 messages / 1 MiB), repeats interleaved.
Prints a table and writes the figures to `bench/results/rounds-<time>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import machine, make_being, settings_for, table, write_results
from singularity.runtime.lifecycle import Runtime
from singularity.testing.scripted_server import ScriptedServer, Turn

KINDS = ("fresh", "full")
OPENING = (
    "Begin autonomous cycle 1. Balance: 10 USD. Earned: 0 USD. Net profit: 0 USD. "
    "Current model: scripted-model. Recent actions: . Inspect opportunities and choose the "
    "next useful action."
)


def script(rounds: int) -> list[Turn]:
    """`rounds` remember calls, then a closing answer."""
    calls = [
        Turn.tool_call(
            "singularity_memory_remember", {"kind": "bench", "text": f"bench memory {index}"}
        )
        for index in range(rounds)
    ]
    return [*calls, Turn.text("done")]


def _served(server: ScriptedServer) -> tuple[int, float]:
    """How many completions the server answered since the last call, and their mean KiB;
    the recorded requests are dropped (the server keeps every body otherwise)."""
    completions = server.completions
    with server._lock:  # no public way to forget requests; see bench/README.md
        server._requests.clear()
    mean = statistics.fmean(len(r.body) for r in completions) / 1024 if completions else 0.0
    return len(completions), mean


async def ours(directory: Path, server: ScriptedServer, kind: str, rounds: int) -> float:
    """Seconds our runtime takes to live the scenario once."""
    state_dir, workspace = directory / "state", directory / "workspace"
    workspace.mkdir()
    flags: dict[str, object] = {
        "brama_url": server.url,
        "workspace": str(workspace),
        "max_tool_rounds": str(rounds + 1),
        "agent_name": "Bench",
        "specialty": "benchmarks",
    }
    make_being(state_dir, "empty" if kind == "fresh" else "full", **flags).close()
    runtime = Runtime.boot(settings_for(state_dir, resume=True, **flags))
    try:
        server.add(*script(rounds))
        loop = asyncio.get_running_loop()
        started = loop.time()
        report = await runtime.once()
        elapsed = loop.time() - started
    finally:
        await runtime.shutdown()
    if report.status != "completed" or len(report.actions) != rounds:
        raise RuntimeError(f"our run did not live the scenario: {report}")
    return elapsed


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run every side for every kind, `--repeats` times, interleaved."""
    runners: dict[str, Callable[[Path, ScriptedServer, str], float]] = {
        "singularity": lambda d, s, k: asyncio.run(ours(d, s, k, args.rounds))
    }
    versions: dict[str, str] = {}
    sqlite: dict[str, Any] = {}
    sdk_share: dict[str, dict[str, list[float]]] = {kind: {} for kind in KINDS}
    if not args.no_langgraph:
        from bench import langgraph_rounds

        versions = langgraph_rounds.versions()
        for durability in args.durability.split(","):
            runners[f"langgraph-{durability}"] = _langgraph_runner(
                langgraph_rounds, durability, args.rounds, sqlite, sdk_share
            )
    seconds: dict[str, dict[str, list[float]]] = {k: {n: [] for n in runners} for k in KINDS}
    request_kib: dict[str, dict[str, float]] = {k: {} for k in KINDS}
    root = Path(tempfile.mkdtemp(prefix="singularity-bench-", dir=args.dir))
    environment = machine(root)
    try:
        with ScriptedServer(default=None) as server:
            for repeat in range(args.repeats):
                names = list(runners) if repeat % 2 == 0 else list(reversed(runners))
                for kind in KINDS:
                    for name in names:
                        directory = root / f"{kind}-{name}-{repeat}"
                        directory.mkdir()
                        _served(server)
                        seconds[kind][name].append(runners[name](directory, server, kind))
                        answered, kib = _served(server)
                        if answered != args.rounds + 1:
                            raise RuntimeError(f"{name} made {answered} model calls")
                        request_kib[kind][name] = kib
                        shutil.rmtree(directory)
                        print(f"  {kind:5} {name:18} {args.rounds / seconds[kind][name][-1]:8.1f}"
                              " rounds/s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    document = _results(args, seconds, request_kib, environment, versions, sqlite)
    for result in document["results"]:
        shares = sdk_share[result["being"]]
        result["langgraph_openai_sdk_share_median"] = {
            name: statistics.median(values) for name, values in shares.items()
        }
    return document


def _langgraph_runner(
    module: Any,
    durability: str,
    rounds: int,
    sqlite: dict[str, Any],
    sdk_share: dict[str, dict[str, list[float]]],
) -> Callable[[Path, ScriptedServer, str], float]:
    name = f"langgraph-{durability}"

    def run(directory: Path, server: ScriptedServer, kind: str) -> float:
        being = module.LangGraphBeing(directory, server.url, kind, durability)
        try:
            sqlite.update(being.sqlite_settings())
            server.add(*script(rounds))
            elapsed, preparing = being.live(OPENING)
        finally:
            being.close()
        sdk_share[kind].setdefault(name, []).append(preparing / elapsed)
        return float(elapsed)

    return run


def _results(
    args: argparse.Namespace,
    seconds: dict[str, dict[str, list[float]]],
    request_kib: dict[str, dict[str, float]],
    environment: dict[str, Any],
    versions: dict[str, str],
    sqlite: dict[str, Any],
) -> dict[str, Any]:
    results = []
    for kind in KINDS:
        rates = {n: [args.rounds / s for s in runs] for n, runs in seconds[kind].items()}
        medians = {n: statistics.median(r) for n, r in rates.items()}
        ratios = {
            f"singularity/{n}": medians["singularity"] / m
            for n, m in medians.items()
            if n != "singularity"
        }
        results.append(
            {
                "being": kind,
                "rounds_per_second_median": medians,
                "rounds_per_second_runs": rates,
                "ms_per_round_median": {n: 1000 / m for n, m in medians.items()},
                "ratio": ratios,
                "request_kib_mean": request_kib[kind],
            }
        )
    return {
        "benchmark": "rounds",
        "command": f"python -m bench.rounds --rounds {args.rounds} --repeats {args.repeats}"
        + (" --no-langgraph" if args.no_langgraph else f" --durability {args.durability}"),
        "machine": environment,
        "langgraph_versions": versions,
        "langgraph_sqlite": sqlite,
        "results": results,
    }


def render(document: dict[str, Any]) -> str:
    """The table printed at the end: one row per being and side."""
    headers = [
        "being", "side", "rounds/s", "ms/round", "ours ÷ this", "request KiB", "in OpenAI SDK"
    ]
    rows = []
    for result in document["results"]:
        shares = result.get("langgraph_openai_sdk_share_median", {})
        for name, rate in result["rounds_per_second_median"].items():
            ratio = result["ratio"].get(f"singularity/{name}")
            share = shares.get(name)
            rows.append(
                [
                    result["being"],
                    name,
                    f"{rate:.1f}",
                    f"{1000 / rate:.1f}",
                    "—" if ratio is None else f"{ratio:.2f}x",
                    f"{result['request_kib_mean'][name]:.0f}",
                    "—" if share is None else f"{share:.0%}",
                ]
            )
    return table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rounds", description=__doc__)
    parser.add_argument("--rounds", type=int, default=100, help="tool rounds per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per being and side")
    parser.add_argument(
        "--durability", default="sync,async,exit", help="LangGraph durability modes to run"
    )
    parser.add_argument("--no-langgraph", action="store_true", help="only our runtime")
    parser.add_argument("--dir", type=Path, default=None, help="where the beings are written")
    args = parser.parse_args(argv)
    document = measure(args)
    print()
    print(render(document))
    print(f"\nwritten to {write_results('rounds', document)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
