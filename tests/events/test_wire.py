"""Events encoded once for every subscriber: the bytes Stream and StreamBatches send decode to
exactly the events of the log, over a real grpc.aio server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.grpc_api import EventServiceServicer
from services.events.grpc_registration import add_to_server
from services.events.leases import LeaseStore
from services.events.log import EventLog
from services.events.wire import MAX_BATCH_MESSAGE_BYTES, EventEncoder, event_message
from shuttle.envelope import type_name
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

from .helpers import draft, stored
from .test_grpc_api import FINISH, append, create, read_all

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub

TYPES = ["PROGRESS", "THREAD_MESSAGE_DELTA", "LLM_PARTIAL", "PROGRESS", "THREAD_MESSAGE_DELTA"]


def request(workflow_id: str = "wf-1") -> events_pb2.StreamRequest:
    return events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id="t1", from_seq=1)


async def batched(stub: Stub, workflow_id: str = "wf-1") -> list[common_pb2.Event]:
    return [e async for batch in stub.StreamBatches(request(workflow_id)) for e in batch.events]


async def listed(stub: Stub) -> list[common_pb2.Event]:
    page = await stub.List(
        events_pb2.ListRequest(workflow_id="wf-1", tenant_id="t1", from_seq=1, limit=100)
    )
    return list(page.events)


async def test_live_and_replayed_bytes_decode_to_the_events_durable_and_ephemeral_in_order(
    stub: Stub,
) -> None:
    await create(stub)
    live_batches = asyncio.ensure_future(batched(stub))
    live_events = asyncio.ensure_future(read_all(stub.Stream(request())))
    await asyncio.sleep(0.2)  # both streams are waiting for the first event
    # A payload long enough for a three-byte length prefix.
    blob = "é" * 20_000
    drafts = [draft(kind, {"n": n, "blob": blob if n == 3 else ""}) for n, kind in enumerate(TYPES)]
    drafts[1].message = "ünïcode ✓"
    for one in drafts:
        await append(stub, one)
    await append(stub, *FINISH)
    history = await listed(stub)
    assert [type_name(e.type) for e in history] == [*TYPES, "WORKFLOW_COMPLETED", "STREAM_END"]
    assert json.loads(history[3].payload_json)["blob"] == blob
    assert history[1].message == "ünïcode ✓"
    assert await live_batches == history
    assert await live_events == history
    # Replayed after the fact: the durable events come from SQL, the rest from the hot tier.
    assert await batched(stub) == history
    assert await read_all(stub.Stream(request())) == history


async def test_each_event_is_encoded_once_for_all_subscribers(
    event_log: EventLog, engine: AsyncEngine
) -> None:
    servicer = EventServiceServicer(event_log, LeaseStore(engine))
    async with served(servicer) as stub:
        await create(stub)
        subscribers = [asyncio.ensure_future(batched(stub)) for _ in range(3)]
        subscribers.append(asyncio.ensure_future(read_all(stub.Stream(request()))))
        await asyncio.sleep(0.2)
        for step in range(5):
            await append(stub, draft("PROGRESS", {"step": step}))
        await append(stub, *FINISH)
        received = await asyncio.gather(*subscribers)
    assert all([e.seq for e in got] == list(range(1, 8)) for got in received)
    assert servicer.encoder.encoded == 7


async def test_a_recreated_workflow_never_gets_the_deleted_ones_bytes(stub: Stub) -> None:
    await create(stub)
    await append(stub, draft("PROGRESS", {"run": "first"}), *FINISH)
    first = await batched(stub)
    await stub.DeleteWorkflows(
        events_pb2.DeleteWorkflowsRequest(tenant_id="t1", workflow_ids=["wf-1"])
    )
    await create(stub)  # the same id, so the same seqs
    await append(stub, draft("PROGRESS", {"run": "second"}), *FINISH)
    second = await batched(stub)
    assert [e.seq for e in first] == [e.seq for e in second] == [1, 2, 3]
    assert first[0].payload_json == '{"run": "first"}'
    assert second[0].payload_json == '{"run": "second"}'
    assert second == await listed(stub)


def test_batch_bytes_are_event_batches_cut_under_the_size_bound() -> None:
    big = '{"blob": "' + "x" * (MAX_BATCH_MESSAGE_BYTES // 2) + '"}'
    events = [stored(seq, payload_json=big if seq % 2 else '{"n": 1}') for seq in range(1, 8)]
    messages = list(EventEncoder().batch_bytes(events))
    assert len(messages) >= 3
    assert all(len(message) <= MAX_BATCH_MESSAGE_BYTES for message in messages)
    decoded = [e for m in messages for e in events_pb2.EventBatch.FromString(m).events]
    assert decoded == [event_message(event) for event in events]


def test_an_equal_seq_event_is_encoded_afresh_and_the_cache_stays_bounded() -> None:
    encoder = EventEncoder(max_events=2)
    first, again = (
        stored(1, payload_json='{"run": "first"}'),
        stored(1, payload_json='{"run": "second"}'),
    )
    assert common_pb2.Event.FromString(encoder.event_bytes(first)).payload_json.endswith('st"}')
    assert common_pb2.Event.FromString(encoder.event_bytes(again)) == event_message(again)
    encoder.event_bytes(first)
    assert encoder.encoded == 2  # `first` was still held
    for seq in range(2, 5):
        encoder.event_bytes(stored(seq, payload_json="{}"))
    encoder.event_bytes(first)
    assert encoder.encoded == 6  # evicted meanwhile, so encoded again


def test_large_events_are_bounded_by_bytes_too() -> None:
    encoder = EventEncoder(max_events=1000, max_bytes=300_000)
    big = '{"blob": "' + "x" * 50_000 + '"}'
    events = [stored(seq, payload_json=big) for seq in range(1, 21)]
    for event in events:
        encoder.event_bytes(event)
    assert encoder.cached_bytes <= 300_000
    encoder.event_bytes(events[-1])  # the newest is still held
    encoder.event_bytes(events[0])  # the oldest went to make room
    assert encoder.encoded == 21


@contextlib.asynccontextmanager
async def served(servicer: EventServiceServicer) -> AsyncIterator[Stub]:
    """A grpc.aio server on a free port serving `servicer`, and a stub on it."""
    server = grpc.aio.server()
    add_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield events_pb2_grpc.EventServiceStub(channel)
    finally:
        await server.stop(grace=None)
