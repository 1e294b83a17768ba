"""Many concurrent runs against a model with a fixed latency, against the ideal wall time.

Every model call waits LATENCY before it answers, so one run of K tool rounds ideally takes
(K + 2) x LATENCY however many run at once (K rounds, the answer, the streamed synthesis;
LangGraph's and the Agents SDK's agents make no synthesis call, so theirs is (K + 1) x LATENCY).
Shuttle runs as its five processes (SQLite, in-process hot tier), each run read until
STREAM_END over ExecutorService.Run, and again with StartRun plus EventService.StreamBatches
(the gateway's way); the peers are the same conversation in this process with a bare
`openai` client, with the model client the executor uses, as LangGraph's prebuilt agent, and
as the peers that persist each run as it goes (LangGraph's agent with its SQLite and its
PostgreSQL checkpointer, the OpenAI Agents SDK's agent with a SQLiteSession). The scripted
model server shares this machine with all of them. One run alone gives each side's floor.

    .venv/bin/python -m bench.suites.react_concurrency [--counts 1 100 1000] [--quick]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from bench.support.meters import CpuMeter
from bench.support.persisting_sides import persisting_sides
from bench.support.react_sides import Sides, calls_per_run, open_sides
from bench.support.results import add_common_arguments, save
from bench.support.spread import Spread, latency_summary
from bench.support.stack import scripted_stack

LATENCY_SECONDS = 0.2
Runner = Callable[[int], Awaitable[None]]
SERVICES = ("events", "tools", "executor")
"""The processes a run goes through (the planner and the gateway take no part in these)."""


async def trial(
    count: int, once: Callable[[], Awaitable[None]], pids: dict[str, int]
) -> dict[str, Any]:
    """`count` runs at once: wall time, each run's duration, how many failed, and the CPU
    each of `pids` used meanwhile."""
    meter = CpuMeter(pids)
    durations: list[float] = []
    failures: list[str] = []

    async def one() -> None:
        started = time.perf_counter()
        try:
            await once()
        except Exception as exc:  # a failed run is a figure to report, not a crash
            failures.append(f"{type(exc).__name__}: {exc}"[:200])
            return
        durations.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return {
        "wall_s": time.perf_counter() - started,
        "run_s": latency_summary(durations),
        "failed": len(failures),
        "first_failure": failures[0] if failures else "",
        "cpu_s": meter.seconds(),
    }


def summarise(trials: list[dict[str, Any]], ideal: float) -> dict[str, Any]:
    walls = Spread.of([t["wall_s"] for t in trials])
    return {
        "ideal_s": ideal,
        "wall_s": walls.as_dict(),
        "x_ideal": walls.scaled(1 / ideal).as_dict(),
        "trials": trials,
        "failed": sum(t["failed"] for t in trials),
    }


def side_runners(sides: Sides, persisting: dict[str, Runner]) -> dict[str, Runner]:
    runners: dict[str, Runner] = {
        "shuttle": sides.shuttle,
        "shuttle_log": sides.shuttle_log,
        "bare": sides.bare,
        "client_loop": sides.client_loop,
    }
    if sides.langgraph is not None:
        runners["langgraph"] = sides.langgraph
    return runners | persisting


async def main(args: argparse.Namespace) -> None:
    counts = args.counts or ([1, 20, 100] if args.quick else [1, 100, 1000])
    repeats = args.repeats or (1 if args.quick else 3)
    rows: list[dict[str, Any]] = []
    with scripted_stack(LATENCY_SECONDS) as (model, stack):
        sides = open_sides(model, stack)
        # The clients of every side run in this process, the model in its own.
        pids = {name: stack.supervisor.processes[name].pid for name in SERVICES}
        pids |= {"model": model.pid, "clients": os.getpid()}
        try:
            async with persisting_sides(model.base_url) as persisting:
                sides_by_name = side_runners(sides, persisting)
                if sides.langgraph is None:
                    print("LangGraph is not installed (the `bench` extra): its side is left out")
                for warm_up in sides_by_name.values():
                    await warm_up(1)
                for count in counts:
                    rows.append(await measure_count(args, count, repeats, sides_by_name, pids))
        finally:
            await sides.close()
    settings = {"latency_s": LATENCY_SECONDS, "counts": counts, "repeats": repeats}
    save(args.json, "react_concurrency", settings, {"rows": rows})


async def measure_count(
    args: argparse.Namespace,
    count: int,
    repeats: int,
    sides_by_name: dict[str, Runner],
    pids: dict[str, int],
) -> dict[str, Any]:
    """`count` runs at once on each side in turn, `repeats` times (the largest count once)."""
    k = args.k if args.k is not None else (3 if count <= 100 else 1)
    ideal = calls_per_run(k) * LATENCY_SECONDS
    # The largest count runs once: on two cores one trial already takes minutes.
    times = repeats if count <= 100 else 1
    row: dict[str, Any] = {"count": count, "k": k, "ideal_s": ideal}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in sides_by_name}
    for _ in range(times):
        for name, run in sides_by_name.items():
            results[name].append(await trial(count, partial(run, k), pids))
    for name, trials in results.items():
        # Each side against its own model calls: the agents make no synthesis call.
        own_ideal = calls_per_run(k, name) * LATENCY_SECONDS
        row[name] = summarise(trials, own_ideal)
        wall = Spread(**row[name]["wall_s"])
        print(
            f"{count:>5} runs K={k} (ideal {own_ideal:.2f} s) {name:<18} wall {wall} s"
            f"  {wall.median / own_ideal:5.2f}x ideal  failed {row[name]['failed']}"
        )
        last = trials[-1]
        used = ", ".join(f"{n} {s:.2f}" for n, s in last["cpu_s"].items())
        print(f"      CPU (s) over the last trial's {last['wall_s']:.2f} s: {used}")
    return row


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", help="concurrent runs (1 100 1000)")
    parser.add_argument("--k", type=int, help="tool rounds per run (3 up to 100 runs, else 1)")
    parser.add_argument("--repeats", type=int, help="trials per count up to 100 (3; quick 1)")
    add_common_arguments(parser)
    asyncio.run(main(parser.parse_args()))
