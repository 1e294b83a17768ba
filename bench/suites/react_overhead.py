"""What the ReAct engine costs per tool iteration, beside bare loops and LangGraph.

All sides talk to the same zero-latency scripted OpenAI-compatible server, which asks for K
calculator calls and then answers. Shuttle runs as its real processes (events, tools,
planner, executor, gateway), so every iteration includes the executor's bookkeeping, the
tools service over gRPC and the event log. Shuttle is measured read two ways, until
STREAM_END: over ExecutorService.Run, which relays the log one event per message, and with
StartRun plus the log read in batches from the events service, as the gateway reads it.
The bare loop (on the `openai` client, and on the model client the executor uses) and
LangGraph's prebuilt ReAct agent call the calculator in-process, and so do the peers that
persist each run as it goes, as Shuttle's log does (`bench/support/persisting_sides.py`):
LangGraph's agent with its SQLite and its PostgreSQL checkpointer, and the OpenAI Agents SDK's
agent with a SQLiteSession. The hops peer
(`bench/peers/hops.py`) makes a run's calls across processes as Shuttle does (tool calls,
Appends, the log relayed over Run) on bare grpc.aio servers: the layout's own cost.
Each K is measured on every side in turn, round after round, so that noise from the machine
falls on all sides alike. With `--baseline DIR`, the five processes of another checkout
(its stubs generated) run too, as the side `baseline`: a change on the hot path measured
before and after in one run, beside the hops peer. Given more than once, each checkout is a
side of its own, named `baseline:<its folder>` (before, after, and a tree without a part).

    .venv/bin/python -m bench.suites.react_overhead [--runs 10] [--quick] [--json PATH]
        [--baseline DIR ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
from collections.abc import Awaitable, Callable
from functools import partial

from bench.peers.hops import hops_peer
from bench.support.persisting_sides import persisting_sides
from bench.support.react_sides import Sides, open_sides, run_over, timed
from bench.support.results import add_common_arguments, save, sized
from bench.support.spread import Spread
from bench.support.stack import add_baseline_argument, baseline_stacks, scripted_stack

KS = (1, 5, 20, 50)
Runner = Callable[[int], Awaitable[None]]


def side_runners(
    sides: Sides, hops: Runner, persisting: dict[str, Runner] | None = None
) -> dict[str, Runner]:
    runners: dict[str, Runner] = {
        "shuttle": sides.shuttle,
        "shuttle_log": sides.shuttle_log,
        "hops": hops,
        "bare": sides.bare,
        "client_loop": sides.client_loop,
    }
    if sides.langgraph is not None:
        runners["langgraph"] = sides.langgraph
    return runners | (persisting or {})


async def measure(
    sides: Sides,
    hops: Runner,
    runs: int,
    baselines: dict[str, Sides] | None = None,
    persisting: dict[str, Runner] | None = None,
) -> dict[str, dict[int, list[float]]]:
    """Seconds per run, by side and K."""
    runners = side_runners(sides, hops, persisting)
    checkouts = baselines or {}
    runners = {name: other.shuttle for name, other in checkouts.items()} | runners
    samples: dict[str, dict[int, list[float]]] = {name: {k: [] for k in KS} for name in runners}
    for once in runners.values():
        await once(2)  # warm-up: connections, imports, caches
    for k in KS:
        for round_number in range(runs):
            for name in round_order(list(runners), [*checkouts, "shuttle"], round_number):
                samples[name][k].append(await timed(partial(runners[name], k)))
    return samples


def round_order(sides: list[str], compared: list[str], round_number: int) -> list[str]:
    """The sides in the order a round runs them: whichever goes first after the others runs
    on a slightly different machine, so the checkouts compared (`compared`, at the head of
    `sides`) take that place in turn; the other sides follow in their own order."""
    shift = round_number % len(compared)
    return compared[shift:] + compared[:shift] + [s for s in sides if s not in compared]


def figures(samples: dict[str, dict[int, list[float]]]) -> dict[str, object]:
    per_iteration = {
        name: {
            str(k): Spread.of([s / k * 1000 for s in runs]).as_dict() for k, runs in by_k.items()
        }
        for name, by_k in samples.items()
    }
    # A run's time is a fixed part (start, synthesis, closing the log) plus K times the cost
    # of one iteration: the slope of the medians is what one more iteration costs.
    fits = {}
    for name, by_k in samples.items():
        medians = [statistics.median(by_k[k]) for k in KS]
        slope, intercept = statistics.linear_regression(KS, medians)
        fits[name] = {"per_iteration_ms": slope * 1000, "fixed_ms": intercept * 1000}
    return {"ks": list(KS), "per_iteration_ms": per_iteration, "fit": fits}


def print_table(result: dict[str, object], runs: int) -> None:
    per_iteration = result["per_iteration_ms"]
    assert isinstance(per_iteration, dict)
    names = list(per_iteration)
    print(f"ms per tool iteration, zero-latency model: median [p25-p75] of {runs} runs")
    print(f"{'K':>4} " + " ".join(f"{name:>22}" for name in names))
    for k in KS:
        cells = []
        for name in names:
            spread = Spread(**per_iteration[name][str(k)])
            cells.append(f"{spread!s:>22}")
        print(f"{k:>4} " + " ".join(cells))
    print("\nfit over K: run time = fixed + K x per-iteration (ms)")
    fits = result["fit"]
    assert isinstance(fits, dict)
    for name, fit in fits.items():
        print(
            f"  {name:<18} per-iteration {fit['per_iteration_ms']:7.2f}"
            f"   fixed {fit['fixed_ms']:7.1f}"
        )


async def main(args: argparse.Namespace) -> None:
    runs = sized(args.runs, args.quick, full=10, small=3)
    with scripted_stack() as (model, stack), contextlib.ExitStack() as other:
        checkouts = baseline_stacks(args.baseline, model.base_url, other)
        async with (
            hops_peer(model.base_url) as hops,
            persisting_sides(model.base_url) as persisting,
        ):
            sides = open_sides(model, stack)
            baselines = {
                name: open_sides(model, running, with_langgraph=False)
                for name, running in checkouts.items()
            }
            try:
                if sides.langgraph is None:
                    print("LangGraph is not installed (the `bench` extra): its column is left out")
                samples = await measure(
                    sides,
                    partial(run_over, hops.executor),
                    runs,
                    baselines=baselines,
                    persisting=persisting,
                )
            finally:
                await sides.close()
                for baseline in baselines.values():
                    await baseline.close()
    result = figures(samples)
    print_table(result, runs)
    save(args.json, "react_overhead", {"runs": runs, "ks": list(KS)}, result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, help="runs per side and K (default 10, quick 3)")
    add_baseline_argument(parser)
    add_common_arguments(parser)
    asyncio.run(main(parser.parse_args()))
