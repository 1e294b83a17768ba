"""Real events and tools services on port 0, and an executor RunManager wired to them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from services.events.__main__ import build as build_events
from services.executor.grpc_clients import GrpcEventSink, GrpcToolHost, GrpcWorkflowRegistry
from services.executor.react import AgentSettings
from services.executor.runs import RunManager, RunRequest
from services.tools.__main__ import build as build_tools
from shuttle.envelope import type_name
from shuttle.grpc_client import open_channel
from shuttle.llm.protocol import LLM
from shuttle.settings import Settings
from shuttle.v1 import events_pb2, events_pb2_grpc, tools_pb2_grpc
from tests.support.scripted_openai import ScriptedOpenAI

TENANT = "tenant-a"


@dataclass
class Backends:
    events: events_pb2_grpc.EventServiceAsyncStub
    tools: GrpcToolHost
    channels: list[grpc.aio.Channel]

    def run_manager(self, llm: LLM, max_iterations: int = 50) -> RunManager:
        return RunManager(
            registry=GrpcWorkflowRegistry(self.events),
            sinks=lambda wf, tenant: GrpcEventSink(self.events, wf, tenant),
            tools=self.tools,
            llm=llm,
            settings=AgentSettings(max_iterations=max_iterations, tool_timeout_seconds=10),
        )

    async def run_to_end(self, runs: RunManager, query: str) -> list[dict[str, Any]]:
        """Start a run and read its whole log, as a subscriber would."""
        workflow_id = await runs.start(RunRequest(query=query, tenant_id=TENANT))
        stream = self.events.Stream(
            events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=TENANT, from_seq=1)
        )
        return [
            {
                "workflow_id": e.workflow_id,
                "seq": e.seq,
                "type": type_name(e.type),
                "agent_id": e.agent_id,
                "message": e.message,
                "payload": json.loads(e.payload_json or "{}"),
            }
            async for e in stream
        ]

    async def workflow(self, workflow_id: str) -> events_pb2.Workflow:
        return await self.events.GetWorkflow(
            events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=TENANT)
        )


@pytest.fixture
async def backends(tmp_path: Path) -> AsyncIterator[Backends]:
    settings = Settings(data_dir=tmp_path, database_url="", tool_timeout_seconds=10)
    events_service = await build_events(settings)
    tools_service = await build_tools(settings)
    events_port = await events_service.start("127.0.0.1", 0)
    tools_port = await tools_service.start("127.0.0.1", 0)
    channels = [open_channel(f"127.0.0.1:{events_port}"), open_channel(f"127.0.0.1:{tools_port}")]
    yield Backends(
        events=events_pb2_grpc.EventServiceStub(channels[0]),
        tools=GrpcToolHost(tools_pb2_grpc.ToolServiceStub(channels[1]), timeout_seconds=10),
        channels=channels,
    )
    for channel in channels:
        await channel.close()
    await tools_service.stop(0)
    await events_service.stop(0)


@pytest.fixture
def model() -> Iterator[ScriptedOpenAI]:
    server = ScriptedOpenAI().start()
    yield server
    server.stop()


def types_of(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def first(events: list[dict[str, Any]], type_: str) -> dict[str, Any]:
    return next(e for e in events if e["type"] == type_)
