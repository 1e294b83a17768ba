"""How a run starts: what it asks the other services for, and in which order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import grpc

from services.executor.adapters.events import GrpcWorkflowRegistry
from services.executor.adapters.tools import ToolClient
from services.executor.ports import EventSink, RunRequest, ToolDefinition, ToolPort
from services.executor.runs import RunManager
from shuttle.llm.openai_model import OpenAIModel
from shuttle.tool_calls import ToolCall, ToolOutcome
from shuttle.workflow_log import EventDraft
from tests.executor.conftest import (
    EVENT_WAIT_SECONDS,
    TENANT,
    Backends,
    agent_defaults,
    first,
    types_of,
)
from tests.support.scripted_openai import ScriptedOpenAI, text


class ListingSeen:
    """The real tool host, noting when the catalog is first asked for; its listings answer
    once `release` is set (at once, unless the test clears it)."""

    def __init__(self, inner: ToolPort) -> None:
        self._inner = inner
        self.listed = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    async def list_tools(self, tenant_id: str) -> Sequence[ToolDefinition]:
        self.listed.set()
        await self.release.wait()
        return await self._inner.list_tools(tenant_id)

    async def execute(self, call: ToolCall) -> ToolOutcome:
        return await self._inner.execute(call)


class CreatedAfterListing:
    """The real registry, creating the workflow only once the catalog has been asked for:
    a run that lists its tools only after its workflow exists never gets past here."""

    def __init__(self, inner: GrpcWorkflowRegistry, tools: ListingSeen) -> None:
        self._inner = inner
        self._tools = tools

    async def create(
        self, request: RunRequest, *, lease_owner: str = "", lease_seconds: float = 0.0
    ) -> str:
        async with asyncio.timeout(EVENT_WAIT_SECONDS):
            await self._tools.listed.wait()
        return await self._inner.create(
            request, lease_owner=lease_owner, lease_seconds=lease_seconds
        )


async def test_the_catalog_is_listed_while_the_workflow_is_created(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(text("Nothing to compute."), text("Nothing to compute."))
    tools = ListingSeen(backends.tools)
    runs = RunManager(
        registry=CreatedAfterListing(GrpcWorkflowRegistry(backends.client), tools),
        sinks=lambda wf, tenant, _epoch: backends.client.producer(wf, tenant, name="run"),
        tools=tools,
        llm=OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0),
        settings=agent_defaults(),
    )

    events = await backends.run_to_end(runs, "Say hello")

    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    # The listing started with the run is the one the agent offers.
    assert "calculator" in first(events, "AGENT_STARTED")["payload"]["tools_available"]
    offered = [t["function"]["name"] for t in model.requests[0]["tools"]]
    assert "calculator" in offered


class BatchesSeen:
    """The real sink, noting which events each Append carried."""

    def __init__(self, inner: EventSink) -> None:
        self._inner = inner
        self.batches: list[list[str]] = []

    async def append(self, drafts: Sequence[EventDraft]) -> Sequence[int]:
        self.batches.append([d.type for d in drafts])
        return await self._inner.append(drafts)


async def test_the_run_opens_its_log_with_one_append(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(text("Nothing to compute."), text("Nothing to compute."))
    sinks: list[BatchesSeen] = []

    def sink(workflow_id: str, tenant_id: str, _epoch: int) -> BatchesSeen:
        sinks.append(BatchesSeen(backends.client.producer(workflow_id, tenant_id, name="run")))
        return sinks[-1]

    runs = RunManager(
        registry=GrpcWorkflowRegistry(backends.client),
        sinks=sink,
        tools=backends.tools,
        llm=OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0),
        settings=agent_defaults(),
    )

    events = await backends.run_to_end(runs, "Say hello")

    assert types_of(events)[-1] == "STREAM_END"
    # WORKFLOW_STARTED does not go alone while the agent waits for its catalog, nor does
    # the first model call's prompt go apart from the thinking that announced it.
    assert sinks[0].batches[0] == [
        "WORKFLOW_STARTED",
        "AGENT_STARTED",
        "AGENT_THINKING",
        "LLM_PROMPT",
    ]


async def test_a_catalog_that_cannot_be_listed_fails_the_run_as_before(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(text("unused"))
    unreachable = grpc.aio.insecure_channel("127.0.0.1:1")  # nothing listens there
    try:
        runs = RunManager(
            registry=GrpcWorkflowRegistry(backends.client),
            sinks=lambda wf, tenant, _epoch: backends.client.producer(wf, tenant, name="run"),
            tools=ToolClient(unreachable, 10),
            llm=OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0),
            settings=agent_defaults(),
        )
        events = await backends.run_to_end(runs, "Say hello")
    finally:
        await unreachable.close()

    assert types_of(events) == ["WORKFLOW_STARTED", "ERROR_OCCURRED", "STREAM_END"]
    failure = first(events, "ERROR_OCCURRED")["payload"]
    assert failure["fatal"] is True and failure["error_type"] == "INTERNAL"
    assert model.requests == []


async def test_a_hanging_catalog_does_not_hold_back_the_start_of_the_run(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(text("Nothing to compute."), text("Nothing to compute."))
    tools = ListingSeen(backends.tools)
    tools.release.clear()  # the catalog hangs
    runs = RunManager(
        registry=GrpcWorkflowRegistry(backends.client),
        sinks=lambda wf, tenant, _epoch: backends.client.producer(wf, tenant, name="run"),
        tools=tools,
        llm=OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0),
        settings=agent_defaults(),
    )
    workflow_id = await runs.start(RunRequest(query="Say hello", tenant_id=TENANT))

    started = await backends.first_event(workflow_id, lambda e: e["type"] == "WORKFLOW_STARTED")
    assert started["seq"] == 1
    assert model.requests == []  # the agent still waits for its catalog
    tools.release.set()
    assert types_of(await backends.read_log(workflow_id))[-2:] == [
        "WORKFLOW_COMPLETED",
        "STREAM_END",
    ]
    await runs.shutdown()
