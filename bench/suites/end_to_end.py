"""End-to-end latency of a one-tool task through all five processes, beside a bare `openai` loop.

Both sides talk to one zero-latency scripted OpenAI-compatible server in a process of its own
(`bench/support/model_server.py`) and make the same three model calls (a tool call, the
answer, the streamed synthesis) and one calculator call; run by run they take turns, so load
from elsewhere falls on both alike. Shuttle's task is asked for the STANDARD mode, as in
`react_overhead`: the bare loop has no router. The difference is what Shuttle adds: five
processes, the gateway's task and session records, gRPC hops, the durable log and SSE.

    .venv/bin/python -m bench.suites.end_to_end [--runs 50] [--concurrency 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import httpx
import openai

from bench.peers.loops import LLM_TIMEOUT_SECONDS, openai_loop
from bench.support.meters import CpuMeter, rss_bytes
from bench.support.results import add_common_arguments, save, sized
from bench.support.spread import latency_summary
from bench.support.stack import scripted_stack
from tests.support.sse import parse_frames

TASK = {"query": "iterations=1", "mode": "standard"}


async def shuttle_run(client: httpx.AsyncClient) -> tuple[float, float, int]:
    """Seconds from POST to the closed SSE stream, seconds until the POST was answered, and
    how many events the stream carried."""
    started = time.perf_counter()
    created = (await client.post("/api/v1/tasks", json=TASK)).json()
    answered = time.perf_counter() - started
    lines: list[str] = []
    async with client.stream(
        "GET", f"/api/v1/stream/sse?workflow_id={created['workflow_id']}"
    ) as response:
        async for line in response.aiter_lines():
            lines.append(line)
    frames, _ = parse_frames(lines)
    assert frames[-1].event == "STREAM_END", frames[-1]
    return time.perf_counter() - started, answered, len(frames)


async def bare_run(client: openai.AsyncOpenAI) -> float:
    """The same conversation with the openai client alone, the tool called in-process."""
    started = time.perf_counter()
    await openai_loop(client, 1)
    return time.perf_counter() - started


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return f"p50 {q[49] * 1000:7.1f} ms   p95 {q[94] * 1000:7.1f} ms   p99 {q[98] * 1000:7.1f} ms"


async def measure(
    gateway: httpx.AsyncClient, bare_client: openai.AsyncOpenAI, runs: int, meter: CpuMeter
) -> tuple[list[tuple[float, float, int]], list[float]]:
    """Both sides, taking turns run by run (each goes first every other round). `meter`
    starts over with the measured runs: the bare loop uses none of Shuttle's processes."""
    await shuttle_run(gateway)  # warm up connections and imports
    await bare_run(bare_client)
    meter.restart()
    shuttle: list[tuple[float, float, int]] = []
    bare: list[float] = []
    for round_number in range(runs):
        if round_number % 2:
            bare.append(await bare_run(bare_client))
            shuttle.append(await shuttle_run(gateway))
        else:
            shuttle.append(await shuttle_run(gateway))
            bare.append(await bare_run(bare_client))
    return shuttle, bare


async def main(args: argparse.Namespace) -> None:
    runs = sized(args.runs, args.quick, full=50, small=10)
    concurrency = sized(args.concurrency, args.quick, full=20, small=5)
    with scripted_stack() as (model, stack):
        bare_client = openai.AsyncOpenAI(
            base_url=model.base_url, api_key="bench", max_retries=0, timeout=LLM_TIMEOUT_SECONDS
        )
        processes = stack.supervisor.processes
        meter = CpuMeter({name: process.pid for name, process in processes.items()})
        async with httpx.AsyncClient(base_url=stack.gateway, timeout=60) as gateway:
            shuttle, bare = await measure(gateway, bare_client, runs, meter)
            cpu_ms = {name: used * 1000 / runs for name, used in meter.seconds().items()}
            started = time.perf_counter()
            together = await asyncio.gather(*(shuttle_run(gateway) for _ in range(concurrency)))
            wall = time.perf_counter() - started
        await bare_client.close()
        memory = {name: rss_bytes(process.pid) / 2**20 for name, process in processes.items()}

    seconds = [total for total, _, _ in shuttle]
    posted = [answered for _, answered, _ in shuttle]
    events = shuttle[0][2]
    extra = statistics.median(seconds) - statistics.median(bare)
    print(f"one task = 3 model calls + 1 tool call; {runs} runs each, taking turns\n")
    print(f"bare openai loop  {percentiles(bare)}")
    print(f"shuttle (5 procs) {percentiles(seconds)}   ({events} events per run over SSE)")
    print(f"  POST answered   {percentiles(posted)}")
    print(
        "  CPU per task    "
        + ", ".join(f"{name} {ms:.1f} ms" for name, ms in cpu_ms.items())
        + f"; all {sum(cpu_ms.values()):.1f} ms"
    )
    print(
        f"added by shuttle  {extra * 1000:7.1f} ms per run (median), "
        f"{extra * 1000 / 3:.1f} ms per model call"
    )
    print(
        f"\n{concurrency} concurrent runs: {wall:.2f} s wall, {concurrency / wall:.1f} runs/s, "
        f"{concurrency * events / wall:.0f} events/s delivered"
    )
    print(f"  latency under that load {percentiles([s for s, _, _ in together])}")
    print(
        "\nresident memory after the runs: "
        + ", ".join(f"{name} {mb:.0f} MB" for name, mb in memory.items())
    )
    to_ms = 1000.0
    figures: dict[str, Any] = {
        "bare_ms": latency_summary([s * to_ms for s in bare]),
        "shuttle_ms": latency_summary([s * to_ms for s in seconds]),
        "posted_ms": latency_summary([s * to_ms for s in posted]),
        "events_per_run": events,
        "cpu_ms_per_task": cpu_ms,
        "concurrent": {
            "runs": concurrency,
            "wall_s": wall,
            "runs_per_s": concurrency / wall,
            "events_per_s": concurrency * events / wall,
            "run_ms": latency_summary([s * to_ms for s, _, _ in together]),
        },
        "rss_mb": memory,
    }
    save(args.json, "end_to_end", {"runs": runs, "concurrency": concurrency}, figures)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, help="runs per side (50; quick 10)")
    parser.add_argument("--concurrency", type=int, help="concurrent tasks (20; quick 5)")
    add_common_arguments(parser)
    asyncio.run(main(parser.parse_args()))
