"""What the output boundary costs a tool call: `redact` against `strict`, side by side.

    .venv/bin/python -m bench.boundary [--runs 200] [--warmup 20]

Each case is a tool result of a size real servers send, bounded into its tool message
(`tool_message`: the boundary, then the compact sorted serialization) in both modes,
interleaved run by run, alternating which mode goes first:

- `plain`: a 48 KiB text file read back (`singularity_file_read`), words and numbers
  only, which both modes pass unchanged: the cost of the walk itself;
- `wide`: an MCP result with 1000 structured entries (`{"name", "size", "kind"}`), which
  both modes pass unchanged;
- `embedded`: an MCP result whose text is a 45 KiB JSON document (as the time server and
  many others answer), parsed and checked in both modes;
- `listing`: server-filesystem's `list_directory` of 1500 entries (`[FILE] name`) with
  the workspace paths it echoes: strict rejects it at its first string, redact passes it
  with the paths shown relative, so this row gives redact's absolute cost only.

The figures are the redact/strict ratios of the medians. Writes
`bench/results/boundary-<time>.json`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import machine, summary, table, write_results
from singularity.tools.base import Outcome
from singularity.tools.catalogue import tool_message
from singularity.tools.output_boundary import OutputBoundary

WS = "/srv/being/workspace"
MODES = {"strict": OutputBoundary("strict", (WS,)), "redact": OutputBoundary("redact", (WS,))}


def _mcp(text: str, structured: Any = None) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if structured is not None:
        result["structuredContent"] = structured
    return result


def cases() -> dict[str, Any]:
    """Case name -> tool result content."""
    line = "the quick brown fox jumps over the lazy dog 1234 5678 and then rests\n"
    plain = {"path": "notes/long.txt", "content": line * (48 * 1024 // len(line))}
    entries = [{"name": f"file-{n:04d}.txt", "size": n * 17, "kind": "file"} for n in range(1000)]
    document = {"items": [{"id": n, "title": f"item {n}", "tags": ["a", "b"]} for n in range(350)]}
    names = "\n".join(f"[FILE] report-{n:04d}.md" for n in range(1500))
    listing = _mcp(f"{names}\nwritten to {WS}/reports/ and {WS}/index.md")
    return {
        "plain": plain,
        "wide": _mcp("1000 entries", {"entries": entries}),
        "embedded": _mcp(json.dumps(document, indent=2)),
        "listing": listing,
    }


def _timed(run: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    run()
    return time.perf_counter_ns() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    options = parser.parse_args()
    report: dict[str, Any] = {"machine": machine(Path.cwd()), "runs": options.runs, "cases": {}}
    rows = []
    for name, content in cases().items():
        outcome = Outcome.success(content)
        samples: dict[str, list[int]] = {mode: [] for mode in MODES}
        shown = {mode: tool_message("c", "t", outcome, b) for mode, b in MODES.items()}
        for run in range(options.warmup + options.runs):
            order = list(MODES) if run % 2 == 0 else list(reversed(MODES))
            for mode in order:
                boundary = MODES[mode]
                elapsed = _timed(lambda b=boundary, o=outcome: tool_message("c", "t", o, b))
                if run >= options.warmup:
                    samples[mode].append(elapsed)
        stats = {mode: summary(values) for mode, values in samples.items()}
        ratio = stats["redact"]["median_ms"] / stats["strict"]["median_ms"]
        size = len(json.dumps(content, separators=(",", ":")).encode())
        report["cases"][name] = {
            "bytes": size,
            "strict": stats["strict"],
            "redact": stats["redact"],
            "strict_rejected": shown["strict"].rejection,
            "redactions": dict(shown["redact"].redactions),
            "samples_ns": samples,
        }
        rows.append(
            [
                name,
                f"{size / 1024:.1f} KiB",
                f"{stats['strict']['median_ms']:.3f} ms"
                + (" (rejected)" if shown["strict"].rejection else ""),
                f"{stats['redact']['median_ms']:.3f} ms",
                f"{stats['redact']['p95_ms']:.3f} ms",
                f"{ratio:.2f}x",
            ]
        )
    headers = ["case", "content", "strict median", "redact median", "redact p95", "ratio"]
    print(table(headers, rows))
    print(f"results: {write_results('boundary', report)}")


if __name__ == "__main__":
    main()
