"""What the ReAct engine costs per tool iteration, beside a bare `openai` loop and LangGraph.

All three sides talk to the same scripted OpenAI-compatible server, which asks for K
calculator calls and then answers. Shuttle runs as its real processes (events, tools,
planner, executor; the run is driven over ExecutorService.Run until STREAM_END), so every
iteration includes the executor's bookkeeping, the tools service over gRPC and the event
log. The bare loop and LangGraph's prebuilt ReAct agent call the calculator in-process.

Part 1: a zero-latency model, K = 5, 20, 50: milliseconds per iteration, side by side.
Part 2: 100 concurrent runs with 200 ms per model call, against the ideal wall time (the
model calls of one run back to back).

    .venv/bin/python -m bench.react_overhead [--runs 10] [--concurrent 100]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import openai

from services.tools.builtins.calculator import Calculator
from shuttle.envelope import type_name
from shuttle.grpc_client import open_channel
from shuttle.v1 import executor_pb2, executor_pb2_grpc
from tests.support.scripted_openai import Reply, ScriptedOpenAI, text, tool_call
from tests.support.stack import start_stack

KS = (5, 20, 50)
CONCURRENT_K = 3
LATENCY_SECONDS = 0.2
CALCULATOR = Calculator()
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]


def k_iterations_model(body: dict[str, Any]) -> Reply:
    """Asks for K calculator calls (K is in the question), then answers."""
    if body.get("stream"):
        return text("All iterations are done.")
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    wanted = int(re.search(r"iterations=(\d+)", str(question)).group(1))  # type: ignore[union-attr]
    done = sum(m["role"] == "tool" for m in body["messages"])
    if done < wanted:
        return tool_call("calculator", {"expression": f"{done}+1"}, call_id=f"call_{done}")
    return text(f"Done after {done} calls.")


async def shuttle_run(stub: executor_pb2_grpc.ExecutorServiceAsyncStub, k: int) -> None:
    request = executor_pb2.StartRunRequest(query=f"iterations={k}", tenant_id="bench")
    last = ""
    async for event in stub.Run(request):
        last = type_name(event.type)
    assert last == "STREAM_END", last


async def bare_run(client: openai.AsyncOpenAI, k: int) -> None:
    """The same conversation with the openai client alone: K tool rounds, answer, synthesis."""
    messages: Any = [{"role": "user", "content": f"iterations={k}"}]
    while True:
        response = await client.chat.completions.create(
            model="scripted-model", messages=messages, tools=TOOLS
        )
        message = response.choices[0].message
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            observation = await CALCULATOR.run({"expression": f"{len(messages)}+1"})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": observation.text})
    stream = await client.chat.completions.create(
        model="scripted-model", messages=messages, stream=True
    )
    async for _ in stream:
        pass


def langgraph_runner(base_url: str) -> Callable[[int], Awaitable[None]] | None:
    try:
        from langchain_core.tools import tool
        from langchain_openai import ChatOpenAI
        from langgraph.prebuilt import create_react_agent
    except ImportError:
        return None

    @tool
    async def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        return (await CALCULATOR.run({"expression": expression})).text

    model = ChatOpenAI(base_url=base_url, api_key="bench", model="scripted-model", max_retries=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's deprecation notice
        agent = create_react_agent(model, [calculator])

    async def run(k: int) -> None:
        config: Any = {"recursion_limit": 2 * k + 10}
        await agent.ainvoke({"messages": [("user", f"iterations={k}")]}, config)

    return run


async def median_seconds(runs: int, once: Callable[[], Awaitable[None]]) -> float:
    await once()  # warm-up: connections, caches
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await once()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def concurrent_wall(count: int, once: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(once() for _ in range(count)))
    return time.perf_counter() - started


async def main(runs: int, concurrent: int) -> None:
    model = ScriptedOpenAI(handler=k_iterations_model).start()
    with tempfile.TemporaryDirectory() as data_dir:
        stack = start_stack(
            Path(data_dir),
            model.base_url,
            extra_env={
                # Guards that add model calls would make the sides' call counts differ.
                "SHUTTLE_REACT_COMPLETION_CHECK": "false",
                "SHUTTLE_LOG_LEVEL": "WARNING",
                "SHUTTLE_MAX_ITERATIONS": "100",
            },
        )
        channel = open_channel(f"127.0.0.1:{stack.grpc_ports['executor']}")
        stub = executor_pb2_grpc.ExecutorServiceStub(channel)
        client = openai.AsyncOpenAI(base_url=model.base_url, api_key="bench", max_retries=0)
        graph = langgraph_runner(model.base_url)
        try:
            print(f"Per tool iteration, zero-latency model, median of {runs} runs (ms)")
            header = f"{'K':>4} {'shuttle':>9} {'bare':>9} {'langgraph':>10} {'overhead':>10}"
            print(header + "   (overhead = shuttle - bare, per iteration)")
            totals: dict[str, list[float]] = {"shuttle": [], "bare": [], "langgraph": []}
            for k in KS:
                ours = await median_seconds(runs, partial(shuttle_run, stub, k))
                bare = await median_seconds(runs, partial(bare_run, client, k))
                lg = await median_seconds(runs, partial(graph, k)) if graph else float("nan")
                for name, value in (("shuttle", ours), ("bare", bare), ("langgraph", lg)):
                    totals[name].append(value)
                print(
                    f"{k:>4} {ours / k * 1000:9.2f} {bare / k * 1000:9.2f} "
                    f"{lg / k * 1000:10.2f} {(ours - bare) / k * 1000:10.2f}"
                )
            # A run's time is a fixed part (start, synthesis, closing the log) plus K times
            # the cost of one iteration: the slope is what one more iteration costs.
            print("\nFit over K: run time = fixed + K x per-iteration (ms)")
            for name, values in totals.items():
                if any(v != v for v in values):  # NaN: LangGraph not installed
                    continue
                slope, intercept = statistics.linear_regression(KS, values)
                print(
                    f"  {name:<9} per-iteration {slope * 1000:7.2f}   fixed {intercept * 1000:7.1f}"
                )

            model.latency_seconds = LATENCY_SECONDS
            calls = CONCURRENT_K + 2  # K tool rounds, the answer, the streamed synthesis
            ideal = calls * LATENCY_SECONDS
            print(
                f"\n{concurrent} concurrent runs, {LATENCY_SECONDS * 1000:.0f} ms per model "
                f"call, K={CONCURRENT_K} ({calls} calls, ideal {ideal:.2f} s)"
            )
            sides: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                ("shuttle", partial(shuttle_run, stub, CONCURRENT_K)),
                ("bare", partial(bare_run, client, CONCURRENT_K)),
            ]
            for name, once in sides:
                wall = await concurrent_wall(concurrent, once)
                print(f"  {name:<8} wall {wall:6.2f} s   {wall / ideal:5.2f}x ideal")
        finally:
            await channel.close()
            await client.close()
            stack.stop()
            model.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--concurrent", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.concurrent))
