"""Memory per in-flight run: executor (and events service) RSS with N runs held mid-iteration.

The scripted model answers each run's first call with a calculator call and then holds the
second call (so every run is mid-iteration, with a tool round in its history) until the
benchmark releases it. Runs start over ExecutorService.StartRun in steps; after each step,
once the model holds every started run's call, the benchmark reads each process's resident
memory. Per run = (RSS with N held - RSS before) / N, after a few runs to warm caches.

    .venv/bin/python -m bench.suites.run_memory [--runs 500] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bench.support.meters import rss_bytes
from bench.support.model_server import k_iterations_model
from bench.support.react_sides import run_request
from bench.support.results import add_common_arguments, save, sized
from bench.support.sse_clients import wait_until
from bench.support.stack import STACK_ENV, running_stack
from shuttle.v1 import executor_pb2_grpc
from tests.support.scripted_openai import ScriptedOpenAI

STEPS = 4
HELD_ROUND = 1
"""Hold calls made after this many tool rounds."""


class HoldingModel(ScriptedOpenAI):
    """The K-iterations model, holding calls after HELD_ROUND tool rounds until released."""

    def __init__(self) -> None:
        super().__init__(handler=k_iterations_model)
        self.holding = True
        self.held = 0
        self._count_lock = threading.Lock()
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        rounds = sum(m.get("role") == "tool" for m in body.get("messages", []))
        if self.holding and rounds == HELD_ROUND and not body.get("stream"):
            if self._release is None:
                self._loop, self._release = asyncio.get_running_loop(), asyncio.Event()
            with self._count_lock:
                self.held += 1
            await self._release.wait()
        return await super()._completions(request)

    def release(self) -> None:
        self.holding = False
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)


def held_at_least(model: HoldingModel, count: int) -> bool:
    return model.held >= count


async def main(args: argparse.Namespace) -> None:
    total = sized(args.runs, args.quick, full=500, small=50)
    model = HoldingModel()
    model.start()
    steps: list[dict[str, Any]] = []
    try:
        with running_stack(STACK_ENV, model.base_url) as stack:
            pids = {name: process.pid for name, process in stack.supervisor.processes.items()}
            channel = stack.channel("executor")
            executor = executor_pb2_grpc.ExecutorServiceStub(channel)
            query = run_request(2)
            try:
                # Warm-up: a few runs to the end, so imports and pools are counted in the baseline.
                model.holding = False
                for _ in range(3):
                    async for _event in executor.Run(query):
                        pass
                model.holding = True
                steps.append({"runs": 0, "rss": {n: rss_bytes(p) for n, p in pids.items()}})
                started = 0
                for step in range(1, STEPS + 1):
                    target = total * step // STEPS
                    await asyncio.gather(
                        *(executor.StartRun(query) for _ in range(target - started))
                    )
                    started = target
                    await wait_until(partial(held_at_least, model, started), 300, "held calls")
                    steps.append(
                        {"runs": started, "rss": {n: rss_bytes(p) for n, p in pids.items()}}
                    )
                    print(
                        f"{started:>5} runs held: "
                        + ", ".join(f"{n} {v / 2**20:.1f} MB" for n, v in steps[-1]["rss"].items())
                    )
                model.release()
            finally:
                await channel.close()
    finally:
        model.stop()
    baseline, last = steps[0]["rss"], steps[-1]["rss"]
    per_run = {name: (last[name] - baseline[name]) / total for name in baseline}
    # The slope over the held steps leaves out what the first held run adds once.
    held = steps[1:]
    slope = {
        name: statistics.linear_regression(
            [s["runs"] for s in held], [s["rss"][name] for s in held]
        ).slope
        for name in baseline
    }
    for name, value in per_run.items():
        print(
            f"{name:<9} {value / 1024:7.1f} KB per in-flight run "
            f"(slope over the steps {slope[name] / 1024:7.1f} KB)"
        )
    save(
        args.json,
        "run_memory",
        {"runs": total, "held_after_rounds": HELD_ROUND},
        {
            "runs": total,
            "steps": steps,
            "per_run_bytes": per_run,
            "slope_bytes": slope,
        },
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, help="runs held at once (500; quick 50)")
    add_common_arguments(parser)
    asyncio.run(main(parser.parse_args()))
