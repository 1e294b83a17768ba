"""The sides the ReAct benchmarks measure: Shuttle, read two ways, and the loops without it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import openai

from bench.peers.langgraph_agent import langgraph_runner
from bench.peers.loops import LLM_TIMEOUT_SECONDS, model_client_loop, openai_loop
from bench.support.model_server import ModelProcess
from bench.support.persisting_sides import PERSISTING_SIDES
from shuttle.envelope import type_name
from shuttle.events_client.follow import follow
from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import common_pb2, events_pb2_grpc, executor_pb2, executor_pb2_grpc
from tests.support.stack import Stack

FOLLOW_RETRY_SECONDS = 30.0
TENANT = "bench"


WITHOUT_SYNTHESIS = frozenset({"langgraph", *PERSISTING_SIDES})
"""The agents of LangGraph and the Agents SDK end with the answer: no synthesis call."""


def calls_per_run(k: int, side: str = "shuttle") -> int:
    """K tool rounds, the answer, and for Shuttle and the bare loops the streamed synthesis."""
    return k + 1 if side in WITHOUT_SYNTHESIS else k + 2


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
        """The same conversation with the openai client alone."""
        await openai_loop(self.client, k)

    async def client_loop(self, k: int) -> None:
        """The same conversation on the model client the executor calls the model with."""
        await model_client_loop(self.model_client, k)

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()
        await self.client.close()
        await self.model_client.close()


async def run_over(executor: executor_pb2_grpc.ExecutorServiceAsyncStub, k: int) -> None:
    """A run of K tool rounds over ExecutorService.Run, read until STREAM_END."""
    last = ""
    async for event in executor.Run(run_request(k)):
        last = type_name(event.type)
    _check_ended(last)


def _check_ended(last_type: str) -> None:
    if last_type != "STREAM_END":
        raise RuntimeError(f"the run's stream ended with {last_type or 'nothing'}")


def open_sides(model: ModelProcess, stack: Stack, with_langgraph: bool = True) -> Sides:
    executor = stack.channel("executor")
    events = stack.channel("events")
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
