"""CPU per ReAct run, by process, beside the hops peer: where a run's milliseconds go.

The K-iterations model (zero latency, its own process), the five Shuttle processes on the
embedded defaults, and the hops peer (`bench/peers/hops.py`: the same crossings between
processes on bare grpc.aio, in three processes playing the events service, the tool host
and the executor). Runs go one after another over ExecutorService.Run until STREAM_END. At
each K the two sides take turns in rounds of runs, and each process's CPU (user + system, all
its threads, from /proc) over a side's runs is divided by their number; the client, this
process, counts as one of each side's processes. A line fitted through each process's CPU
per run against K splits it into what a run pays once and what each tool round adds. Beside
them the wall time per run, and the bare `openai` loop's against the same model. On two
cores, the sum across processes is what bounds many concurrent runs. With `--baseline DIR`,
another checkout's five processes take their turns too: a change measured before and after
in one run.

    .venv/bin/python -m bench.suites.run_cpu [--ks 1 20] [--runs 40] [--rounds 4]
        [--json PATH] [--baseline DIR ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench.peers.hops import hops_peer
from bench.support.meters import CpuMeter
from bench.support.react_sides import open_sides, run_over
from bench.support.results import add_common_arguments, save, sized
from bench.support.stack import add_baseline_argument, baseline_stacks, scripted_stack
from tests.support.stack import Stack

SERVICES = ("events", "tools", "planner", "executor", "gateway")
WARM_UP_RUNS = 5
ROUNDS = 4
"""Turns each side takes at each K: load from elsewhere falls on both alike. Comparing
checkouts whose difference is a few percent wants more (`--rounds 20`), since the machine
drifts within a measurement."""

ACTIVE_MS = 0.05
"""CPU per run below which, at some K, a process is taken for one a run over Run never
reaches (the planner, the gateway): what it spends is its own background work."""

Runner = Callable[[int], Awaitable[None]]


class _Side:
    """One side's runs at one K: their CPU by process and their wall times."""

    def __init__(self, run: Runner, pids: dict[str, int]) -> None:
        self.run = run
        self._meter = CpuMeter(pids)
        self.cpu_seconds = dict.fromkeys(pids, 0.0)
        self.walls: list[float] = []

    async def measure(self, k: int, runs: int) -> None:
        self._meter.restart()
        for _ in range(runs):
            started = time.perf_counter()
            await self.run(k)
            self.walls.append(time.perf_counter() - started)
        for name, used in self._meter.seconds().items():
            self.cpu_seconds[name] += used

    def figures(self) -> dict[str, Any]:
        runs = len(self.walls)
        return {
            "cpu_ms_per_run": {n: s / runs * 1000 for n, s in self.cpu_seconds.items()},
            "wall_ms_median": statistics.median(self.walls) * 1000,
        }


async def measure_k(
    k: int, runs: int, runners: dict[str, tuple[Runner, dict[str, int]]], rounds: int = ROUNDS
) -> Any:
    """Every side at K, taking turns round by round (each goes first in turn); `runs` is a
    multiple of `rounds`."""
    sides = {name: _Side(run, pids) for name, (run, pids) in runners.items()}
    names = list(sides)
    per_round = runs // rounds
    for round_number in range(rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            await sides[name].measure(k, per_round)
    return {name: side.figures() for name, side in sides.items()}


def fit(ks: list[int], cpu_by_k: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each process's CPU per run as fixed + K * per tool round (least squares), and all."""
    names = list(cpu_by_k[0])
    lines = {}
    for name in [*names, "all"]:
        values = [sum(cpu.values()) if name == "all" else cpu[name] for cpu in cpu_by_k]
        slope, intercept = statistics.linear_regression(ks, values)
        lines[name] = {"fixed_ms": intercept, "per_iteration_ms": slope}
    return lines


async def measure(
    ks: list[int], runs: int, baselines: list[Path] | None = None, rounds: int = ROUNDS
) -> dict[str, Any]:
    with scripted_stack() as (model, stack), contextlib.ExitStack() as other:
        stacks = {"shuttle": stack} | baseline_stacks(baselines, model.base_url, other)
        opened = {name: open_sides(model, s, with_langgraph=False) for name, s in stacks.items()}
        client = os.getpid()
        try:
            async with hops_peer(model.base_url) as hops:
                runners: dict[str, tuple[Runner, dict[str, int]]] = {
                    name: (opened[name].shuttle, _pids(s) | {"client": client})
                    for name, s in stacks.items()
                }
                runners["hops"] = (partial(run_over, hops.executor), hops.pids | {"client": client})
                runners["bare"] = (opened["shuttle"].bare, {"client": client})
                for run, _ in runners.values():
                    for _ in range(WARM_UP_RUNS):
                        await run(ks[0])
                by_k = {k: await measure_k(k, runs, runners, rounds) for k in ks}
        finally:
            for sides in opened.values():
                await sides.close()
    figures: dict[str, Any] = {"ks": ks, "runs": runs, "sides": {}, "fit": {}}
    for side in [*stacks, "hops"]:
        figures["sides"][side] = {str(k): by_k[k][side] for k in ks}
        cpu = [by_k[k][side]["cpu_ms_per_run"] for k in ks]
        active = [name for name in cpu[0] if all(c[name] >= ACTIVE_MS for c in cpu)]
        figures["fit"][side] = fit(ks, [{name: c[name] for name in active} for c in cpu])
    figures["bare_wall_ms_median"] = {str(k): by_k[k]["bare"]["wall_ms_median"] for k in ks}
    return figures


def _pids(stack: Stack) -> dict[str, int]:
    return {name: stack.supervisor.processes[name].pid for name in SERVICES}


def print_figures(figures: dict[str, Any]) -> None:
    sides = list(figures["sides"])
    heading = " / ".join("hops peer" if side == "hops" else side for side in sides)
    for k in figures["ks"]:
        at_k = {side: figures["sides"][side][str(k)] for side in sides}
        print(f"K={k}: ms of CPU per run ({heading})")
        for name in at_k["shuttle"]["cpu_ms_per_run"]:
            cells = [at_k[side]["cpu_ms_per_run"].get(name) for side in sides]
            row = "".join(f" {cell:7.1f}" if cell is not None else "       —" for cell in cells)
            print(f"  {name:<9}{row}")
        walls = " / ".join(f"{at_k[side]['wall_ms_median']:.1f}" for side in sides)
        print(
            f"  wall per run {walls} ms (median); "
            f"bare openai loop {figures['bare_wall_ms_median'][str(k)]:.1f} ms"
        )
    print(f"fit, ms of CPU: once per run / per tool round ({heading})")
    for name in figures["fit"]["shuttle"]:
        lines = [figures["fit"][side].get(name) for side in sides]
        cells = [
            f"{line['fixed_ms']:6.1f} / {line['per_iteration_ms']:5.2f}" if line else "—"
            for line in lines
        ]
        print(f"  {name:<9} " + " | ".join(cells))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ks", type=int, nargs="+", help="tool rounds per run (1 20)")
    parser.add_argument("--runs", type=int, help="measured runs per side and K (40; quick 8)")
    add_baseline_argument(parser)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="turns per side and K (4)")
    add_common_arguments(parser)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    ks = sorted(set(args.ks or ([1, 5] if args.quick else [1, 20])))
    if len(ks) < 2:
        parser.error("--ks needs two values or more: the fit splits CPU by K")
    # Whole rounds: each side makes as many runs in each.
    rounds = args.rounds
    runs = max(rounds, sized(args.runs, args.quick, full=40, small=8) // rounds * rounds)
    figures = await measure(ks, runs, args.baseline, rounds)
    print_figures(figures)
    save(args.json, "run_cpu", {"ks": ks, "runs": runs, "rounds": rounds}, figures)


if __name__ == "__main__":
    asyncio.run(main())
