"""End-to-end latency of one task through all five processes, beside a bare `openai` loop.

Both sides talk to the same zero-latency scripted OpenAI-compatible server and make the same
three model calls (tool call, answer, streamed synthesis) plus one calculator call, so the
difference is what Shuttle adds: five processes, gRPC hops, the durable log and SSE.

    .venv/bin/python -m bench.suites.end_to_end [--runs 50] [--concurrency 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import openai

from bench.support.meters import rss_bytes
from bench.support.results import add_common_arguments, save, sized
from bench.support.spread import latency_summary
from services.tools.builtins.calculator import Calculator
from tests.support.models import arithmetic_model
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.sse import parse_frames
from tests.support.stack import start_stack


async def shuttle_run(client: httpx.AsyncClient) -> tuple[float, int]:
    """Seconds from POST to the closed SSE stream, and how many events it carried."""
    started = time.perf_counter()
    created = (await client.post("/api/v1/tasks", json={"query": "What is 12*7?"})).json()
    lines: list[str] = []
    async with client.stream(
        "GET", f"/api/v1/stream/sse?workflow_id={created['workflow_id']}"
    ) as response:
        async for line in response.aiter_lines():
            lines.append(line)
    frames, _ = parse_frames(lines)
    assert frames[-1].event == "STREAM_END", frames[-1]
    return time.perf_counter() - started, len(frames)


async def bare_run(client: openai.AsyncOpenAI, calculator: Calculator) -> float:
    """The same conversation with the openai client alone, the tool called in-process."""
    started = time.perf_counter()
    tools: Any = [{"type": "function", "function": {"name": "calculator", "parameters": {}}}]
    messages: Any = [{"role": "user", "content": "What is 12*7?"}]
    first = await client.chat.completions.create(model="m", messages=messages, tools=tools)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    observation = await calculator.run({"expression": "12*7"})
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": observation.text},
    ]
    await client.chat.completions.create(model="m", messages=messages, tools=tools)
    stream = await client.chat.completions.create(model="m", messages=messages, stream=True)
    async for _ in stream:
        pass
    return time.perf_counter() - started


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return f"p50 {q[49] * 1000:7.1f} ms   p95 {q[94] * 1000:7.1f} ms   p99 {q[98] * 1000:7.1f} ms"


async def main(args: argparse.Namespace) -> None:
    runs = sized(args.runs, args.quick, full=50, small=10)
    concurrency = sized(args.concurrency, args.quick, full=20, small=5)
    model = ScriptedOpenAI(handler=arithmetic_model).start()
    with tempfile.TemporaryDirectory() as data_dir:
        stack = start_stack(Path(data_dir), model.base_url)
        try:
            async with httpx.AsyncClient(base_url=stack.gateway, timeout=60) as client:
                await shuttle_run(client)  # warm up connections and imports
                shuttle = [await shuttle_run(client) for _ in range(runs)]
                started = time.perf_counter()
                together = await asyncio.gather(*(shuttle_run(client) for _ in range(concurrency)))
                wall = time.perf_counter() - started
            memory = {n: rss_bytes(p.pid) / 2**20 for n, p in stack.supervisor.processes.items()}
        finally:
            stack.stop()
    bare_client = openai.AsyncOpenAI(base_url=model.base_url, api_key="k", max_retries=0)
    calculator = Calculator()
    await bare_run(bare_client, calculator)
    bare = [await bare_run(bare_client, calculator) for _ in range(runs)]
    await bare_client.close()
    model.stop()

    seconds = [s for s, _ in shuttle]
    events = shuttle[0][1]
    extra = statistics.median(seconds) - statistics.median(bare)
    print(f"one task = 3 model calls + 1 tool call; {runs} sequential runs each\n")
    print(f"bare openai loop  {percentiles(bare)}")
    print(f"shuttle (5 procs) {percentiles(seconds)}   ({events} events per run over SSE)")
    print(
        f"added by shuttle  {extra * 1000:7.1f} ms per run (median), "
        f"{extra * 1000 / 3:.1f} ms per model call"
    )
    print(
        f"\n{concurrency} concurrent runs: {wall:.2f} s wall, {concurrency / wall:.1f} runs/s, "
        f"{concurrency * events / wall:.0f} events/s delivered"
    )
    print(f"  latency under that load {percentiles([s for s, _ in together])}")
    print(
        "\nresident memory after the runs: "
        + ", ".join(f"{name} {mb:.0f} MB" for name, mb in memory.items())
    )
    to_ms = 1000.0
    figures = {
        "bare_ms": latency_summary([s * to_ms for s in bare]),
        "shuttle_ms": latency_summary([s * to_ms for s in seconds]),
        "events_per_run": events,
        "concurrent": {
            "runs": concurrency,
            "wall_s": wall,
            "runs_per_s": concurrency / wall,
            "events_per_s": concurrency * events / wall,
            "run_ms": latency_summary([s * to_ms for s, _ in together]),
        },
        "rss_mb": memory,
    }
    save(args.json, "end_to_end", {"runs": runs, "concurrency": concurrency}, figures)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, help="sequential runs per side (50; quick 10)")
    parser.add_argument("--concurrency", type=int, help="concurrent tasks (20; quick 5)")
    add_common_arguments(parser)
    asyncio.run(main(parser.parse_args()))
