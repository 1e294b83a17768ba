"""The scripted model, the sides and the stack the ReAct benchmarks share."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import openai

from services.tools.builtins.calculator import Calculator
from shuttle.envelope import type_name
from shuttle.grpc_client import open_channel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.llm.protocol import ChatResult
from shuttle.log_follow import follow
from shuttle.v1 import common_pb2, events_pb2_grpc, executor_pb2, executor_pb2_grpc
from tests.support.stack import Stack

from .model_server import ModelProcess, model_process
from .stack import running_stack

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
LLM_TIMEOUT_SECONDS = 120.0
FOLLOW_RETRY_SECONDS = 30.0
TENANT = "bench"
# Guards that add model calls would make the sides' call counts differ; the gateway's
# per-client request limit would refuse a benchmark's many connections from one address.
STACK_ENV = {
    "SHUTTLE_REACT_COMPLETION_CHECK": "false",
    "SHUTTLE_LOG_LEVEL": "WARNING",
    "SHUTTLE_MAX_ITERATIONS": "100",
    "SHUTTLE_RATE_LIMIT": "1000000/minute",
}


def calls_per_run(k: int) -> int:
    """K tool rounds, the answer, the streamed synthesis."""
    return k + 2


def run_request(k: int) -> executor_pb2.StartRunRequest:
    """A ReAct run of K tool rounds. The mode is given, as the peers have no router: left to
    the planner, routing is one more structured model call per run (and against this scripted
    model, which never answers it in JSON, one per fallback level)."""
    return executor_pb2.StartRunRequest(
        query=f"iterations={k}", tenant_id=TENANT, mode=common_pb2.MODE_STANDARD
    )


@dataclass
class Sides:
    """Shuttle (two ways of reading a run), the bare loop on the `openai` client and on
    Shuttle's own model client, and LangGraph, if installed."""

    stack: Stack
    channels: tuple[grpc.aio.Channel, ...]
    executor: executor_pb2_grpc.ExecutorServiceAsyncStub
    events: events_pb2_grpc.EventServiceAsyncStub
    client: openai.AsyncOpenAI
    model_client: OpenAIModel
    langgraph: Callable[[int], Awaitable[None]] | None

    async def shuttle(self, k: int) -> None:
        """ExecutorService.Run: the executor relays the run's log, one event per message."""
        await run_over(self.executor, k)

    async def shuttle_log(self, k: int) -> None:
        """ExecutorService.StartRun, then the run's log read in batches from the events
        service (EventService.StreamBatches), as the gateway reads it."""
        started = await self.executor.StartRun(run_request(k))
        last = ""
        async for events in follow(
            self.events, TENANT, started.workflow_id, 1, FOLLOW_RETRY_SECONDS
        ):
            last = type_name(events[-1].type)
        _check_ended(last)

    async def bare(self, k: int) -> None:
        """The same conversation with the openai client alone: K tool rounds, answer, synthesis."""
        messages: Any = [{"role": "user", "content": f"iterations={k}"}]
        while True:
            response = await self.client.chat.completions.create(
                model="scripted-model", messages=messages, tools=TOOLS
            )
            message = response.choices[0].message
            if not message.tool_calls:
                break
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                observation = await CALCULATOR.run({"expression": f"{len(messages)}+1"})
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": observation.text}
                )
        stream = await self.client.chat.completions.create(
            model="scripted-model", messages=messages, stream=True
        )
        async for _ in stream:
            pass

    async def client_loop(self, k: int) -> None:
        """The same conversation as `bare`, on the model client the executor calls the model
        with: what the model calls cost Shuttle, with no engine, services or log around them."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"iterations={k}"}]
        while True:
            result = await self.model_client.chat(messages, TOOLS)
            if not result.tool_calls:
                break
            messages.append(assistant_message(result))
            for call in result.tool_calls:
                observation = await CALCULATOR.run({"expression": f"{len(messages)}+1"})
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": observation.text}
                )
        async for _ in self.model_client.stream_chat(messages):
            pass

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()
        await self.client.close()
        await self.model_client.close()


def assistant_message(result: ChatResult) -> dict[str, Any]:
    """The model's reply as the next request's assistant message, tool calls included."""
    return {
        "role": "assistant",
        "content": result.content,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in result.tool_calls
        ],
    }


async def run_over(executor: executor_pb2_grpc.ExecutorServiceAsyncStub, k: int) -> None:
    """A run of K tool rounds over ExecutorService.Run, read until STREAM_END."""
    last = ""
    async for event in executor.Run(run_request(k)):
        last = type_name(event.type)
    _check_ended(last)


def _check_ended(last_type: str) -> None:
    if last_type != "STREAM_END":
        raise RuntimeError(f"the run's stream ended with {last_type or 'nothing'}")


def langgraph_runner(base_url: str) -> Callable[[int], Awaitable[None]] | None:
    """LangGraph's prebuilt ReAct agent on the same model, or None without the bench extra."""
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


@contextlib.contextmanager
def scripted_stack(latency_seconds: float = 0.0) -> Iterator[tuple[ModelProcess, Stack]]:
    """The K-iterations model in its own process and the five Shuttle processes (SQLite,
    in-process hot tier)."""
    with (
        model_process(latency_seconds) as model,
        running_stack(STACK_ENV, model.base_url) as stack,
    ):
        yield model, stack


def open_sides(model: ModelProcess, stack: Stack, with_langgraph: bool = True) -> Sides:
    executor = open_channel(f"127.0.0.1:{stack.grpc_ports['executor']}")
    events = open_channel(f"127.0.0.1:{stack.grpc_ports['events']}")
    return Sides(
        stack=stack,
        channels=(executor, events),
        executor=executor_pb2_grpc.ExecutorServiceStub(executor),
        events=events_pb2_grpc.EventServiceStub(events),
        # As patient as the executor's client: with a thousand runs starting at once on two
        # cores, the SDK's default 5 s connect timeout fails the peer, not the model.
        client=openai.AsyncOpenAI(
            base_url=model.base_url, api_key="bench", max_retries=0, timeout=LLM_TIMEOUT_SECONDS
        ),
        model_client=OpenAIModel(
            model.base_url, "bench", "scripted-model", LLM_TIMEOUT_SECONDS, max_retries=0
        ),
        langgraph=langgraph_runner(model.base_url) if with_langgraph else None,
    )


async def timed(once: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await once()
    return time.perf_counter() - started
