"""Real events, tools and planner services on port 0, and executor RunManagers wired to them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from services.events.__main__ import build as build_events
from services.executor.adapters.events import GrpcRunLog, GrpcWorkflowRegistry, run_sink
from services.executor.adapters.planner import PlannerClient
from services.executor.adapters.tools import ToolClient
from services.executor.commands.feed import IDLE_CLOSE_SECONDS, CommandFeed
from services.executor.dag.ports import ModelPicker
from services.executor.dag.steps import StepLimits
from services.executor.dag.team import TeamSettings
from services.executor.engine.settings import AgentSettings
from services.executor.grpc_api import ExecutorServicer
from services.executor.lease import Leasing
from services.executor.ports import Router, RunRequest, ToolSelector
from services.executor.runs import EmitterSettings, RunManager
from services.planner.__main__ import build as build_planner
from services.tools.__main__ import build as build_tools
from shuttle.envelope import type_name
from shuttle.events_client import EventsClient
from shuttle.grpc_client import open_channel
from shuttle.grpc_server import GrpcService
from shuttle.llm.protocol import LLM
from shuttle.settings import Settings
from shuttle.v1 import events_pb2, events_pb2_grpc, executor_pb2, executor_pb2_grpc
from tests.support.holding_model import HoldingModel
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.team_model import TeamModel, TimedScriptedOpenAI

TENANT = "tenant-a"
EVENT_WAIT_SECONDS = 60
"""How long a test waits for an event it expects: generous, for a loaded machine."""


def agent_defaults() -> AgentSettings:
    """The deployment's defaults, as tests must take their thresholds from."""
    return AgentSettings.from_settings(Settings())


def as_dict(e: Any) -> dict[str, Any]:
    return {
        "workflow_id": e.workflow_id,
        "seq": e.seq,
        "type": type_name(e.type),
        "agent_id": e.agent_id,
        "message": e.message,
        "payload": json.loads(e.payload_json or "{}"),
    }


async def read_log(
    events: events_pb2_grpc.EventServiceAsyncStub, workflow_id: str
) -> list[dict[str, Any]]:
    """The whole log of a TENANT workflow, to its STREAM_END, as a subscriber reads it."""
    request = events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=TENANT, from_seq=1)
    return [as_dict(e) async for e in events.Stream(request)]


@dataclass
class Backends:
    events: events_pb2_grpc.EventServiceAsyncStub
    """For the tests' own reading of the logs."""
    client: EventsClient
    """The events client the executor is built with."""
    tools: ToolClient
    planner: PlannerClient
    ports: dict[str, int]
    channels: list[grpc.aio.Channel]
    executors: list[GrpcService] = field(default_factory=list)

    def run_manager(
        self,
        llm: LLM,
        selector: ToolSelector | None = None,
        *,
        team: TeamSettings | None = None,
        step_limits: StepLimits | None = None,
        leasing: Leasing | None = None,
        sink_options: Mapping[str, int] | None = None,
        emitter: EmitterSettings | None = None,
        models: ModelPicker | None = None,
        router: Router | None = None,
        feed_idle_seconds: float = IDLE_CLOSE_SECONDS,
        **overrides: Any,
    ) -> RunManager:
        """Without a `router`, runs that name no mode run STANDARD."""
        settings = replace(agent_defaults(), tool_timeout_seconds=10, **overrides)
        return RunManager(
            registry=GrpcWorkflowRegistry(self.client),
            sinks=lambda wf, tenant, epoch: run_sink(
                self.client, wf, tenant, lease_epoch=epoch, **(sink_options or {})
            ),
            tools=self.tools,
            llm=llm,
            settings=settings,
            commands=CommandFeed(self.client, feed_idle_seconds),
            selector=selector or self.planner,
            planner=self.planner,
            team=team,
            step_limits=step_limits,
            leasing=leasing,
            run_log=GrpcRunLog(self.client),
            emitter=emitter,
            models=models,
            router=router,
        )

    async def serve(
        self, runs: RunManager
    ) -> tuple[executor_pb2_grpc.ExecutorServiceAsyncStub, int]:
        """An ExecutorService on port 0 in front of `runs`: a client stub and the port."""
        service = GrpcService(
            name="executor",
            service_names=[executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name],
            register=lambda server: executor_pb2_grpc.add_ExecutorServiceServicer_to_server(
                ExecutorServicer(runs, self.client), server
            ),
        )
        port = await service.start("127.0.0.1", 0)
        self.executors.append(service)
        channel = open_channel(f"127.0.0.1:{port}")
        self.channels.append(channel)
        return executor_pb2_grpc.ExecutorServiceStub(channel), port

    async def read_log(self, workflow_id: str) -> list[dict[str, Any]]:
        """The whole log of a workflow, to its STREAM_END, as a subscriber reads it."""
        return await read_log(self.events, workflow_id)

    async def first_event(
        self, workflow_id: str, matches: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        """The first event on the log that `matches`, waiting for it live."""
        stream = self.events.Stream(
            events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=TENANT, from_seq=1)
        )
        try:
            async with asyncio.timeout(EVENT_WAIT_SECONDS):
                async for event in stream:
                    found = as_dict(event)
                    if matches(found):
                        return found
        finally:
            stream.cancel()
        raise AssertionError("the log ended without the awaited event")

    async def run_to_end(
        self, runs: RunManager, query: str, **request: Any
    ) -> list[dict[str, Any]]:
        """Start a run and read its whole log."""
        workflow_id = await runs.start(RunRequest(query=query, tenant_id=TENANT, **request))
        return await self.read_log(workflow_id)

    async def workflow(self, workflow_id: str) -> events_pb2.Workflow:
        return await self.events.GetWorkflow(
            events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=TENANT)
        )


async def start_backends(
    data_dir: Path,
    planner_model_url: str = "",
    tool_hooks: str = "",
    tool_timeout_seconds: float = 10,
) -> tuple[Backends, list[GrpcService]]:
    """The planner uses the demo model, or the OpenAI-compatible server at
    `planner_model_url`; `tool_hooks` is a hooks file's text for the tools service (whose
    approvals then go on the events service's log)."""
    settings = Settings(
        data_dir=data_dir, database_url="", tool_timeout_seconds=tool_timeout_seconds
    )
    planner_settings = settings
    if planner_model_url:
        planner_settings = settings.model_copy(
            update={"openai_base_url": planner_model_url, "llm_max_retries": 0}
        )
    events = await build_events(settings)
    ports = {"events": await events.start("127.0.0.1", 0)}
    # The tools service appends to the runs' logs too (its approval gate).
    tools_settings = settings.model_copy(update={"events_addr": f"127.0.0.1:{ports['events']}"})
    if tool_hooks:
        hooks_file = data_dir / "hooks.yaml"
        hooks_file.write_text(tool_hooks)
        tools_settings = tools_settings.model_copy(update={"tool_hooks_file": hooks_file})
    services = [events, await build_tools(tools_settings), await build_planner(planner_settings)]
    for name, service in zip(("tools", "planner"), services[1:], strict=True):
        ports[name] = await service.start("127.0.0.1", 0)
    channels = [open_channel(f"127.0.0.1:{ports[name]}") for name in ("events", "tools", "planner")]
    backends = Backends(
        events=events_pb2_grpc.EventServiceStub(channels[0]),
        client=EventsClient(channels[0]),
        tools=ToolClient(channels[1], timeout_seconds=10),
        planner=PlannerClient(channels[2]),
        ports=ports,
        channels=channels,
    )
    return backends, services


@asynccontextmanager
async def running_backends(
    data_dir: Path,
    planner_model_url: str = "",
    tool_hooks: str = "",
    tool_timeout_seconds: float = 10,
) -> AsyncIterator[Backends]:
    """`start_backends`, stopped again (executors, channels, services) on the way out."""
    started, services = await start_backends(
        data_dir, planner_model_url, tool_hooks, tool_timeout_seconds
    )
    try:
        yield started
    finally:
        for executor in started.executors:
            await executor.stop(0)
        await started.client.close()
        for channel in started.channels:
            await channel.close()
        for service in reversed(services):
            await service.stop(0)


# The DAG test modules: each defines a `team` fixture (the scripted planner, steps and
# reviewer); modules testing the ReAct engine define a `server` of their own instead.
@pytest.fixture
def server(team: TeamModel) -> Iterator[TimedScriptedOpenAI]:
    started = TimedScriptedOpenAI(team)
    started.start()
    yield started
    started.stop()


@pytest.fixture
async def dag(tmp_path: Path, server: TimedScriptedOpenAI) -> AsyncIterator[Backends]:
    async with running_backends(tmp_path, server.base_url) as started:
        yield started


@pytest.fixture
async def backends(tmp_path: Path) -> AsyncIterator[Backends]:
    async with running_backends(tmp_path) as started:
        yield started


@pytest.fixture
def holding_model() -> Iterator[HoldingModel]:
    server = HoldingModel()
    server.start()
    yield server
    server.release()
    server.stop()


@pytest.fixture
def model() -> Iterator[ScriptedOpenAI]:
    server = ScriptedOpenAI().start()
    yield server
    server.stop()


def types_of(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def first(events: list[dict[str, Any]], type_: str) -> dict[str, Any]:
    return next(e for e in events if e["type"] == type_)


def of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]
