"""Per-call client overhead against history length: Shuttle's LLM layer beside the plain
`openai` client, in the same process.

Both send the same chat request through the same `openai` client class; the HTTP transport
answers in-process with a canned completion, so the figure is client time only (building and
encoding the request, parsing the reply), not network or server time.

    .venv/bin/python -m bench.suites.llm_overhead [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import openai

from bench.support.results import add_common_arguments, save, sized
from bench.support.spread import Spread
from shuttle.llm.openai_model import OpenAIModel

HISTORY_LENGTHS = (2, 50, 200)

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "done"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }
).encode()


async def _answer(request: httpx2.Request) -> httpx2.Response:
    await request.aread()
    return httpx2.Response(200, content=COMPLETION, headers={"content-type": "application/json"})


def http_client() -> openai.DefaultAsyncHttpxClient:
    return openai.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(_answer))


def history(length: int) -> list[dict[str, Any]]:
    """A tool-loop history: system, user, then assistant tool calls and tool results."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant. " * 20},
        {"role": "user", "content": "Find the three cheapest flights to Osaka next week."},
    ]
    turn = 0
    while len(messages) < length:
        turn += 1
        arguments = json.dumps({"query": f"flights to Osaka, page {turn}", "limit": 20})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{turn}",
                        "type": "function",
                        "function": {"name": "web_search", "arguments": arguments},
                    }
                ],
            }
        )
        messages.append(
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": "result line. " * 60}
        )
    return messages[:length]


async def per_call_ms(call: Callable[[], Awaitable[Any]], calls: int) -> Spread:
    for _ in range(10):  # warm-up
        await call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return Spread.of(samples)


async def main(args: argparse.Namespace) -> None:
    calls = sized(args.calls, args.quick, full=200, small=30)
    plain = openai.AsyncOpenAI(
        base_url="http://bench.invalid/v1", api_key="k", max_retries=0, http_client=http_client()
    )
    ours = OpenAIModel(
        "http://bench.invalid/v1", "k", "bench-model", 30.0, 0, http_client=http_client()
    )
    print(f"median client time per call, ms ({calls} calls each, in-process transport)")
    print(f"{'messages':>8}  {'openai create':>13}  {'shuttle chat':>12}  {'speed-up':>8}")
    rows = []
    for length in HISTORY_LENGTHS:
        messages: Any = history(length)

        async def plain_call(messages: Any = messages) -> Any:
            return await plain.chat.completions.create(model="bench-model", messages=messages)

        async def our_call(messages: Any = messages) -> Any:
            return await ours.chat(messages)

        sdk = await per_call_ms(plain_call, calls)
        shuttle = await per_call_ms(our_call, calls)
        speed_up = sdk.median / shuttle.median
        print(f"{length:>8}  {sdk.median:>13.3f}  {shuttle.median:>12.3f}  {speed_up:>7.1f}x")
        rows.append(
            {"messages": length, "openai_ms": sdk.as_dict(), "shuttle_ms": shuttle.as_dict()}
        )
    await plain.close()
    await ours.close()
    save(args.json, "llm_overhead", {"calls": calls}, {"rows": rows})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, help="calls per side and length (200; quick 30)")
    add_common_arguments(parser)
    asyncio.run(main(parser.parse_args()))
