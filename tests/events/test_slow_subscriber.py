"""A subscriber that stops reading neither blocks the writer or other subscribers nor
loses events: once it falls behind the hot tier's buffer it catches up from SQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from shuttle.grpc_client import tenant_metadata
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

from .conftest import RunningEvents
from .helpers import draft

TENANT = tenant_metadata("t1")
BATCHES, BATCH = 40, 50


@pytest.fixture
async def small_buffer_stub(tmp_path: Path) -> AsyncIterator[events_pb2_grpc.EventServiceAsyncStub]:
    # A 20-event hot buffer: the stalled reader falls far behind it.
    settings = Settings(database_url="", data_dir=tmp_path / "var", events_hot_max_events=20)
    running = RunningEvents(settings)
    await running.start()
    async with grpc.aio.insecure_channel(running.target) as channel:
        yield events_pb2_grpc.EventServiceStub(channel)
    await running.stop()


async def test_stalled_subscriber_catches_up_completely(
    small_buffer_stub: events_pb2_grpc.EventServiceAsyncStub,
) -> None:
    stub = small_buffer_stub
    created = await stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(), metadata=TENANT)
    request = events_pb2.StreamRequest(workflow_id=created.workflow_id, from_seq=1)
    await stub.Append(
        events_pb2.AppendRequest(
            workflow_id=created.workflow_id, events=[draft("WORKFLOW_STARTED")]
        ),
        metadata=TENANT,
    )
    stalled = stub.Stream(request, metadata=TENANT)
    first = await stalled.read()  # subscribed and live; then it reads nothing for a while
    assert isinstance(first, common_pb2.Event)

    lively: list[int] = []

    async def follow() -> None:
        async for event in stub.Stream(request, metadata=TENANT):
            lively.append(event.seq)

    follower = asyncio.create_task(follow())
    padding = "x" * 1000  # a few MB in all: far beyond the stream's flow-control window
    for batch in range(BATCHES):
        await stub.Append(
            events_pb2.AppendRequest(
                workflow_id=created.workflow_id,
                events=[draft("PROGRESS", {"b": batch, "pad": padding}) for _ in range(BATCH)],
            ),
            metadata=TENANT,
        )
    # Every append returned while the stalled reader had taken at most one event.
    await stub.Append(
        events_pb2.AppendRequest(
            workflow_id=created.workflow_id, events=[draft("WORKFLOW_COMPLETED")]
        ),
        metadata=TENANT,
    )
    await asyncio.wait_for(follower, 60)
    total = 1 + BATCHES * BATCH + 2
    assert lively == list(range(1, total + 1))
    seen = [first.seq]
    while (event := await stalled.read()) is not grpc.aio.EOF:
        assert isinstance(event, common_pb2.Event)
        seen.append(event.seq)
    assert seen == list(range(1, total + 1))
