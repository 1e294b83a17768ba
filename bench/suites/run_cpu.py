"""CPU per ReAct run, by process: what one run of K tool rounds costs each Shuttle service.

The K-iterations model (zero latency, its own process) and the five Shuttle processes on the
embedded defaults; runs go one after another over ExecutorService.Run until STREAM_END, after
a few to warm up. Each process's CPU (user + system, all its threads, from /proc) over the
measured runs, divided by their number; beside it the wall time per run, and the bare
`openai` loop's wall time against the same model in this process as the peer. On two cores,
the sum across processes is what bounds many concurrent runs.

    .venv/bin/python -m bench.suites.run_cpu [--k 5] [--runs 40] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from bench.support.meters import CpuMeter
from bench.support.react_sides import open_sides
from bench.support.results import add_common_arguments, save, sized
from bench.support.stack import scripted_stack

SERVICES = ("events", "tools", "planner", "executor", "gateway")
WARM_UP_RUNS = 5


async def measure(k: int, runs: int) -> dict[str, Any]:
    with scripted_stack() as (model, stack):
        sides = open_sides(model, stack, with_langgraph=False)
        try:
            pids = {name: stack.supervisor.processes[name].pid for name in SERVICES}
            for _ in range(WARM_UP_RUNS):
                await sides.shuttle(k)
                await sides.bare(k)
            meter = CpuMeter(pids)
            walls = []
            for _ in range(runs):
                started = time.perf_counter()
                await sides.shuttle(k)
                walls.append(time.perf_counter() - started)
            cpu_ms = {name: used / runs * 1000 for name, used in meter.seconds().items()}
            bare = []
            for _ in range(runs):
                started = time.perf_counter()
                await sides.bare(k)
                bare.append(time.perf_counter() - started)
        finally:
            await sides.close()
    return {
        "k": k,
        "runs": runs,
        "cpu_ms_per_run": cpu_ms,
        "cpu_ms_per_run_total": sum(cpu_ms.values()),
        "wall_ms_median": statistics.median(walls) * 1000,
        "bare_wall_ms_median": statistics.median(bare) * 1000,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=5, help="tool rounds per run")
    parser.add_argument("--runs", type=int, help="measured runs (40; quick 10)")
    add_common_arguments(parser)
    args = parser.parse_args()
    figures = await measure(args.k, sized(args.runs, args.quick, full=40, small=10))
    for name, ms in figures["cpu_ms_per_run"].items():
        print(f"{name:<9} {ms:7.1f} ms of CPU per run")
    print(
        f"all       {figures['cpu_ms_per_run_total']:7.1f} ms of CPU per run; wall per run "
        f"{figures['wall_ms_median']:.1f} ms (median), bare openai loop "
        f"{figures['bare_wall_ms_median']:.1f} ms"
    )
    save(args.json, "run_cpu", {"k": args.k, "runs": figures["runs"]}, figures)


if __name__ == "__main__":
    asyncio.run(main())
