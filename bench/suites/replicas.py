"""Runs per second and CPU per run with 1 and with 3 executor replicas, and how runs spread.

The stack as `shuttle up --replicas executor=N` starts it (PostgreSQL, Redis; one process of
every other service), the K-iterations model in its own process at a fixed latency per call.
C runs at a time over ExecutorService.StartRun (balanced round_robin over the executors),
each read from the events service to STREAM_END, until N runs have ended. Runs per second
is N over the wall time; CPU per run is every Shuttle process's CPU (from /proc) over the
measured runs, divided by N; the spread is how many runs each executor ran, told by the
lease owner each run's workflow records.

    .venv/bin/python -m bench.suites.replicas [--k 3] [--runs 300] [--concurrency 30]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.support.meters import CpuMeter
from bench.support.model_server import model_process
from bench.support.react_sides import TENANT, run_request
from bench.support.results import add_common_arguments, save, sized
from bench.support.stack import STACK_ENV
from shuttle.envelope import type_name
from shuttle.events_client.follow import follow
from shuttle.v1 import events_pb2, events_pb2_grpc, executor_pb2_grpc
from tests.support.replicated_stack import ReplicatedStack, replicated_stack

EXECUTORS = (1, 3)
WARM_UP_RUNS = 6
MODEL_LATENCY_SECONDS = 0.05


async def one_run(
    executor: executor_pb2_grpc.ExecutorServiceAsyncStub,
    events: events_pb2_grpc.EventServiceAsyncStub,
    k: int,
) -> str:
    started = await executor.StartRun(run_request(k), timeout=60)
    last = ""
    async for batch in follow(events, TENANT, started.workflow_id, 1, 60.0):
        last = type_name(batch[-1].type)
    if last != "STREAM_END":
        raise RuntimeError(f"run {started.workflow_id} ended with {last or 'nothing'}")
    return str(started.workflow_id)


async def drive(stack: ReplicatedStack, k: int, runs: int, concurrency: int) -> dict[str, Any]:
    async with stack.channel("executor") as executor_channel, stack.channel("events") as channel:
        executor: executor_pb2_grpc.ExecutorServiceAsyncStub = (
            executor_pb2_grpc.ExecutorServiceStub(executor_channel)
        )
        events: events_pb2_grpc.EventServiceAsyncStub = events_pb2_grpc.EventServiceStub(channel)
        for _ in range(WARM_UP_RUNS):
            await one_run(executor, events, k)
        meter = CpuMeter({name: p.pid for name, p in stack.supervisor.processes.items()})
        gate = asyncio.Semaphore(concurrency)

        async def limited() -> str:
            async with gate:
                return await one_run(executor, events, k)

        started = time.perf_counter()
        ids = await asyncio.gather(*(limited() for _ in range(runs)))
        wall = time.perf_counter() - started
        cpu = meter.seconds()
        owners = [
            (
                await events.GetWorkflow(
                    events_pb2.GetWorkflowRequest(workflow_id=wf, tenant_id=TENANT), timeout=10
                )
            ).lease_owner
            for wf in ids
        ]
    by_pid = stack.pid_names()
    spread = Counter(by_pid.get(int(owner.split(":")[1]), "other") for owner in owners)
    return {
        "runs_per_second": runs / wall,
        "wall_seconds": wall,
        "cpu_ms_per_run": {name: used / runs * 1000 for name, used in sorted(cpu.items())},
        "cpu_ms_per_run_total": sum(cpu.values()) / runs * 1000,
        "runs_by_executor": dict(sorted(spread.items())),
    }


async def measure(executors: int, k: int, runs: int, concurrency: int) -> dict[str, Any]:
    env = {**STACK_ENV, "SHUTTLE_AUTH": "off"}
    with (
        model_process(MODEL_LATENCY_SECONDS) as model,
        tempfile.TemporaryDirectory() as data_dir,
        replicated_stack(Path(data_dir), {"executor": executors}, model.base_url, env) as stack,
    ):
        return await drive(stack, k, runs, concurrency)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=3, help="tool rounds per run")
    parser.add_argument("--runs", type=int, help="measured runs per setting (300; quick 30)")
    parser.add_argument("--concurrency", type=int, default=30, help="runs in flight at once")
    add_common_arguments(parser)
    args = parser.parse_args()
    runs = sized(args.runs, args.quick, full=300, small=30)
    figures = {}
    for count in EXECUTORS:
        found = await measure(count, args.k, runs, args.concurrency)
        figures[str(count)] = found
        spread = ", ".join(f"{name} {n}" for name, n in found["runs_by_executor"].items())
        print(
            f"{count} executor(s): {found['runs_per_second']:.1f} runs/s, "
            f"{found['cpu_ms_per_run_total']:.1f} ms of CPU per run; runs by executor: {spread}",
            flush=True,
        )
    settings = {
        "k": args.k,
        "runs": runs,
        "concurrency": args.concurrency,
        "latency_s": MODEL_LATENCY_SECONDS,
    }
    save(args.json, "replicas", settings, figures)


if __name__ == "__main__":
    asyncio.run(main())
