"""SHUTTLE_TENANT_MAX_RUNS: a tenant's active workflows are counted in the transaction that
would add one, so no burst of creates, on any number of replicas, passes the limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from services.events.errors import AlreadyExists, ResourceExhausted
from services.events.hot import MemoryHotTier
from services.events.log import EventLog
from services.events.records import WorkflowRecord
from services.events.store import SqlEventStore
from services.executor.__main__ import build as build_executor
from shuttle.grpc_client import open_channel, tenant_metadata
from shuttle.settings import Settings
from shuttle.v1 import events_pb2, events_pb2_grpc, executor_pb2, executor_pb2_grpc
from tests.support.databases import EngineMaker, free_port

from .conftest import RunningEvents
from .helpers import new

LIMIT = 2
REFUSAL = (
    f"tenant t1 already has {LIMIT} active runs (SHUTTLE_TENANT_MAX_RUNS={LIMIT}); "
    "wait for one to end"
)


def limited_log(engines: EngineMaker, limit: int = LIMIT) -> EventLog:
    """One replica of the log, with the tenant limit."""
    return EventLog(SqlEventStore(engines(), tenant_max_runs=limit), MemoryHotTier())


async def test_a_tenant_at_its_limit_is_refused_until_a_run_ends(engines: EngineMaker) -> None:
    event_log = limited_log(engines)
    first = await event_log.create_workflow(tenant_id="t1")
    second = await event_log.create_workflow(tenant_id="t1")
    with pytest.raises(ResourceExhausted) as refused:
        await event_log.create_workflow(tenant_id="t1")
    assert str(refused.value) == REFUSAL
    await event_log.create_workflow(tenant_id="t2")  # another tenant is not held back
    # Running and paused runs are active too.
    await event_log.append(first.workflow_id, "t1", [new("WORKFLOW_STARTED")])
    await event_log.append(second.workflow_id, "t1", [new("WORKFLOW_PAUSED")])
    with pytest.raises(ResourceExhausted):
        await event_log.create_workflow(tenant_id="t1")
    await event_log.append(first.workflow_id, "t1", [new("WORKFLOW_COMPLETED", {})])
    third = await event_log.create_workflow(tenant_id="t1")
    with pytest.raises(ResourceExhausted):
        await event_log.create_workflow(tenant_id="t1")
    # A log closed without a terminal event is over as well.
    await event_log.append(third.workflow_id, "t1", [new("STREAM_END")])
    await event_log.create_workflow(tenant_id="t1")


async def test_a_taken_id_is_reported_as_taken_even_at_the_limit(engines: EngineMaker) -> None:
    event_log = limited_log(engines)
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-one")
    await event_log.create_workflow(tenant_id="t1", workflow_id="wf-two")
    with pytest.raises(AlreadyExists):
        await event_log.create_workflow(tenant_id="t1", workflow_id="wf-two")


async def test_no_limit_when_zero(engines: EngineMaker) -> None:
    event_log = limited_log(engines, limit=0)
    for _ in range(5):
        await event_log.create_workflow(tenant_id="t1")


async def test_concurrent_creates_on_several_replicas_never_pass_the_limit(
    engines: EngineMaker,
) -> None:
    """Twenty creates at once, spread over four replicas of the log (engines of their own):
    exactly the limit's worth get in, on SQLite (its write lock) and PostgreSQL (the
    tenant's advisory lock)."""
    replicas = [limited_log(engines) for _ in range(4)]

    async def attempt(index: int) -> WorkflowRecord | ResourceExhausted:
        try:
            return await replicas[index % 4].create_workflow(tenant_id="t1")
        except ResourceExhausted as refused:
            return refused

    outcomes = await asyncio.gather(*(attempt(index) for index in range(20)))
    created = [o for o in outcomes if isinstance(o, WorkflowRecord)]
    refused = [o for o in outcomes if isinstance(o, ResourceExhausted)]
    assert (len(created), len(refused)) == (LIMIT, 20 - LIMIT)
    # Another tenant's burst meets its own limit only.
    others = await asyncio.gather(
        *(replicas[i % 4].create_workflow(tenant_id="t2") for i in range(LIMIT))
    )
    assert len(others) == LIMIT


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"tenant_max_runs": 1})


async def test_create_workflow_answers_resource_exhausted(
    stub: events_pb2_grpc.EventServiceAsyncStub,
) -> None:
    metadata = tenant_metadata("t1")
    await stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=metadata)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=metadata)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.details() == (
        "tenant t1 already has 1 active runs (SHUTTLE_TENANT_MAX_RUNS=1); wait for one to end"
    )
    # The service is still up, and another tenant still gets its workflow.
    other = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(), metadata=tenant_metadata("t2")
    )
    assert other.tenant_id == "t2"


@pytest.fixture
async def executor(
    server: RunningEvents, settings: Settings, tmp_path: Path
) -> AsyncIterator[executor_pb2_grpc.ExecutorServiceAsyncStub]:
    """The real executor service, on the events service above; the tools and planner it
    would call next are never reached by the calls of these tests."""
    unreachable = f"127.0.0.1:{free_port()}"
    executor_settings = settings.model_copy(
        update={
            "events_addr": server.target,
            "tools_addr": unreachable,
            "planner_addr": unreachable,
            "data_dir": tmp_path / "executor",
        }
    )
    service = await build_executor(executor_settings)
    port = await service.start("127.0.0.1", 0)
    channel = open_channel(f"127.0.0.1:{port}")
    yield executor_pb2_grpc.ExecutorServiceStub(channel)
    await channel.close()
    await service.stop(grace=1.0)


async def test_start_run_passes_the_refusal_on_to_its_caller(
    stub: events_pb2_grpc.EventServiceAsyncStub,
    executor: executor_pb2_grpc.ExecutorServiceAsyncStub,
) -> None:
    # The tenant's one slot is taken by a workflow not yet started.
    await stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=tenant_metadata("t1"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await executor.StartRun(executor_pb2.StartRunRequest(query="hello", tenant_id="t1"))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.details() == (
        "events service: tenant t1 already has 1 active runs (SHUTTLE_TENANT_MAX_RUNS=1); "
        "wait for one to end"
    )
