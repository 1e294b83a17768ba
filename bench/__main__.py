"""`python -m bench`: run the benchmark suite, save its figures, and render docs/benchmarks.md.

Each benchmark runs as its own process (`python -m bench.suites.<module> --json
var/bench/<name>.json`) so no two share an event loop, a memory figure or an open-file limit.
A benchmark that fails is reported and the others still run; the report renders whatever was
saved.

    .venv/bin/python -m bench [--quick] [--only NAME ...] [--results var/bench]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.support.other_work import OtherWork
from bench.support.other_work import record as record_other_work

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Benchmark:
    name: str
    """Also the results file's name."""
    module: str
    arguments: tuple[str, ...] = ()


SUITE = (
    Benchmark("llm_overhead", "bench.suites.llm_overhead"),
    Benchmark("react_overhead", "bench.suites.react_overhead"),
    Benchmark("react_concurrency", "bench.suites.react_concurrency"),
    Benchmark("run_cpu", "bench.suites.run_cpu"),
    Benchmark("end_to_end", "bench.suites.end_to_end"),
    Benchmark("tool_hooks", "bench.suites.tool_hooks"),
    Benchmark("events_append", "bench.suites.events_append"),
    Benchmark("events_append-batched", "bench.suites.events_append", ("--batched",)),
    Benchmark("events_latency-sqlite", "bench.suites.events_latency"),
    Benchmark(
        "events_latency-pg", "bench.suites.events_latency", ("--backend", "pg", "--grpc-only")
    ),
    Benchmark(
        "events_latency-batched", "bench.suites.events_latency", ("--batched", "--grpc-only")
    ),
    Benchmark(
        "events_latency-pg-batched",
        "bench.suites.events_latency",
        ("--backend", "pg", "--batched", "--grpc-only"),
    ),
    Benchmark("events_latency-sequential", "bench.suites.events_latency", ("--sequential",)),
    Benchmark("sse_fanout", "bench.suites.sse_fanout"),
    Benchmark("sse_idle", "bench.suites.sse_idle"),
    Benchmark("run_memory", "bench.suites.run_memory"),
    Benchmark("replicas", "bench.suites.replicas"),
    Benchmark("takeover", "bench.suites.takeover"),
)


def run(benchmark: Benchmark, results: Path, quick: bool, timeout: float) -> tuple[bool, float]:
    command = [
        sys.executable,
        "-m",
        benchmark.module,
        *benchmark.arguments,
        "--json",
        str(results / f"{benchmark.name}.json"),
        *(["--quick"] if quick else []),
    ]
    print(f"\n== {benchmark.name}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    other_work = OtherWork.start()
    try:
        finished = subprocess.run(command, cwd=REPO, timeout=timeout, check=False)
        ok = finished.returncode == 0
    except subprocess.TimeoutExpired:
        print(f"{benchmark.name} did not finish within {timeout:.0f} s", flush=True)
        ok = False
    if ok:
        record_other_work(results / f"{benchmark.name}.json", other_work.cpus_used())
    return ok, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument("--only", nargs="+", choices=[b.name for b in SUITE], metavar="NAME")
    parser.add_argument("--results", type=Path, default=REPO / "var" / "bench")
    parser.add_argument("--doc", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--images", type=Path, default=REPO / "docs" / "img")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per benchmark")
    args = parser.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    durations: dict[str, float] = {}
    for benchmark in SUITE:
        if args.only and benchmark.name not in args.only:
            continue
        ok, durations[benchmark.name] = run(benchmark, args.results, args.quick, args.timeout)
        if not ok:
            failed.append(benchmark.name)
    print("\n" + "\n".join(f"{name:<28} {seconds:6.0f} s" for name, seconds in durations.items()))
    from bench.report.render import render_files  # matplotlib only once something ran

    render_files(args.results, args.doc, args.images)
    print(f"wrote {args.doc} and its charts under {args.images}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
