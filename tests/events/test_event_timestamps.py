"""An event's timestamp is when it happened: the producer's stamp is kept, the events service
stamps only what came unstamped, and a stamp far in the future is refused, naming the bound."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from shuttle.events_client import EventsClient
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from shuttle.workflow_log import EventDraft

from .conftest import RunningEvents
from .test_grpc_api import append, create


@pytest.fixture
async def strict(settings: Settings) -> AsyncIterator[RunningEvents]:
    """The events service taking stamps at most 60 s past its clock."""
    running = RunningEvents(settings.model_copy(update={"events_max_future_seconds": 60.0}))
    await running.start()
    yield running
    await running.stop()


def progress_at(seconds: int) -> common_pb2.EventDraft:
    return common_pb2.EventDraft(
        type=common_pb2.EVENT_TYPE_PROGRESS, timestamp=Timestamp(seconds=seconds)
    )


async def test_a_stamp_past_the_bound_is_refused_and_nothing_is_stored(
    strict: RunningEvents,
) -> None:
    async with grpc.aio.insecure_channel(strict.target) as channel:
        stub = events_pb2_grpc.EventServiceStub(channel)
        await create(stub)
        now = int(time.time())
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await append(stub, progress_at(now - 5), progress_at(now + 3600))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = str(refused.value.details())
        assert "event 1: timestamp" in details
        assert "SHUTTLE_EVENTS_MAX_FUTURE_SECONDS" in details
        # Within the bound (clocks a little apart) is taken, at the next seq.
        assert await append(stub, progress_at(now + 30)) == [1]
        page = await stub.List(events_pb2.ListRequest(workflow_id="wf-1", tenant_id="t1"))
        assert [e.timestamp.seconds for e in page.events] == [now + 30]


async def test_producers_stamp_each_draft_when_it_was_made(
    channel: grpc.aio.Channel, stub: events_pb2_grpc.EventServiceAsyncStub
) -> None:
    await create(stub)
    made = EventDraft("PROGRESS", "earlier", {"percentage": 10})
    earlier = replace(made, at=made.at - 42.25)
    client = EventsClient(channel)
    await client.append_once("wf-1", "t1", [earlier, made], name="test")

    page = await stub.List(events_pb2.ListRequest(workflow_id="wf-1", tenant_id="t1"))
    first, second = (e.timestamp.ToNanoseconds() / 1e9 for e in page.events)
    # Both carry their own stamps (to the microsecond SQL keeps), not the append's time.
    assert first == pytest.approx(earlier.at, abs=1e-5)
    assert second == pytest.approx(made.at, abs=1e-5)
