"""EventService.StreamBatches on a real grpc.aio server: the events of Stream, several to a
message, and messages kept well under gRPC's size limit."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import grpc
import pytest

from services.events.wire import MAX_BATCH_MESSAGE_BYTES
from shuttle.envelope import type_name, type_value
from shuttle.v1 import common_pb2, events_pb2

from .helpers import draft
from .test_grpc_api import FINISH, append, create, read_all

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub


def request(**fields: object) -> events_pb2.StreamRequest:
    return events_pb2.StreamRequest(workflow_id="wf-1", tenant_id="t1", **fields)  # type: ignore[arg-type]


async def batches(stub: Stub, **fields: object) -> list[list[tuple[int, str]]]:
    """Every message of a StreamBatches call, as (seq, type) lists."""
    return [
        [(event.seq, type_name(event.type)) for event in batch.events]
        async for batch in stub.StreamBatches(request(**fields))
    ]


async def test_replay_then_live_arrives_in_batches_and_ends_after_stream_end(
    stub: Stub,
) -> None:
    await create(stub)
    await append(stub, *[draft("PROGRESS", {"step": n}) for n in range(3)])
    call = stub.StreamBatches(request(from_seq=1))
    first = await call.read()
    assert isinstance(first, events_pb2.EventBatch)
    assert [event.seq for event in first.events] == [1, 2, 3]  # the replay: one message
    await append(stub, draft("PROGRESS"), draft("PROGRESS"), *FINISH)
    rest: list[common_pb2.Event] = []
    while not rest or type_name(rest[-1].type) != "STREAM_END":
        batch = await call.read()
        assert isinstance(batch, events_pb2.EventBatch), "the stream ended early"
        rest += batch.events
    assert await call.read() == grpc.aio.EOF
    assert [event.seq for event in rest] == [4, 5, 6, 7]
    assert type_name(rest[-1].type) == "STREAM_END"
    assert json.loads(first.events[2].payload_json) == {"step": 2}


async def test_same_events_as_stream_with_a_types_filter_and_from_seq(stub: Stub) -> None:
    await create(stub)
    await append(stub, draft("PROGRESS"), draft("TOOL_INVOKED"), draft("PROGRESS"))
    await append(stub, draft("TOOL_INVOKED"), *FINISH)
    wanted = [type_value("TOOL_INVOKED")]
    got = [pair for batch in await batches(stub, from_seq=2, types=wanted) for pair in batch]
    streamed = await read_all(stub.Stream(request(from_seq=2, types=wanted)))
    assert got == [(e.seq, type_name(e.type)) for e in streamed]
    assert got == [(2, "TOOL_INVOKED"), (4, "TOOL_INVOKED"), (6, "STREAM_END")]


async def test_large_events_are_split_across_messages_in_order(stub: Stub) -> None:
    await create(stub)
    big = "x" * (MAX_BATCH_MESSAGE_BYTES // 2)
    await append(stub, *[draft("PROGRESS", {"blob": big}) for _ in range(5)], *FINISH)
    got = await batches(stub)
    assert len(got) >= 3  # at most two such events fit one message
    assert [seq for batch in got for seq, _ in batch] == list(range(1, 8))


async def test_unknown_workflow_is_not_found(stub: Stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await batches(stub)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_live_reader_receives_what_is_appended_while_it_waits(stub: Stub) -> None:
    await create(stub)
    reader = asyncio.create_task(batches(stub))
    for step in range(5):
        await append(stub, draft("PROGRESS", {"step": step}))
    await append(stub, *FINISH)
    got = await asyncio.wait_for(reader, timeout=60)
    assert [seq for batch in got for seq, _ in batch] == list(range(1, 8))
