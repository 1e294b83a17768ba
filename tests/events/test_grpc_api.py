"""The real EventService on a real grpc.aio server (port 0) over a real SQLite file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterable
from typing import TYPE_CHECKING

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from shuttle.envelope import type_name
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

from .conftest import RunningEvents
from .helpers import draft

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub
FINISH = [draft("WORKFLOW_COMPLETED", {"result": "84", "total_tokens": 12}), draft("STREAM_END")]


async def create(stub: Stub, workflow_id: str = "wf-1", tenant: str = "t1") -> None:
    await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(
            tenant_id=tenant, workflow_id=workflow_id, owner="alice", query="12*7?"
        )
    )


async def append(
    stub: Stub, *drafts: common_pb2.EventDraft, workflow_id: str = "wf-1"
) -> list[int]:
    response = await stub.Append(
        events_pb2.AppendRequest(workflow_id=workflow_id, tenant_id="t1", events=drafts)
    )
    return list(response.seqs)


StreamCall = grpc.aio.UnaryStreamCall[events_pb2.StreamRequest, common_pb2.Event]


async def read_all(stream: AsyncIterable[common_pb2.Event]) -> list[common_pb2.Event]:
    return [event async for event in stream]


async def take(call: StreamCall, count: int) -> list[common_pb2.Event]:
    """The next `count` events of a live stream."""
    taken = []
    for _ in range(count):
        item = await call.read()
        assert isinstance(item, common_pb2.Event), "the stream ended early"
        taken.append(item)
    return taken


async def test_create_then_get(stub: Stub) -> None:
    created = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(tenant_id="t1", owner="alice", query="q", session_id="s-1")
    )
    assert created.workflow_id.startswith("wf-")
    assert created.status == common_pb2.WORKFLOW_STATUS_PENDING
    fetched = await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id=created.workflow_id, tenant_id="t1")
    )
    assert (fetched.owner, fetched.query, fetched.session_id, fetched.last_seq) == (
        "alice",
        "q",
        "s-1",
        0,
    )
    assert fetched.created_at.seconds > 0


async def test_appends_get_gap_free_seqs(stub: Stub) -> None:
    await create(stub)
    assert await append(stub, draft("WORKFLOW_STARTED")) == [1]
    assert await append(stub, draft("PROGRESS"), draft("LLM_PARTIAL"), draft("PROGRESS")) == [
        2,
        3,
        4,
    ]
    await create(stub, "wf-2")
    assert await append(stub, draft("PROGRESS"), workflow_id="wf-2") == [1]


async def test_twenty_concurrent_grpc_appenders(stub: Stub) -> None:
    await create(stub)

    async def appender(index: int) -> list[list[int]]:
        return [
            await append(stub, *[draft("PROGRESS", {"from": index})] * (1 + (index + n) % 4))
            for n in range(5)
        ]

    results = await asyncio.gather(*(appender(i) for i in range(20)))
    batches = [batch for result in results for batch in result]
    for batch in batches:
        assert batch == list(range(batch[0], batch[0] + len(batch)))
    everything = sorted(seq for batch in batches for seq in batch)
    assert everything == list(range(1, len(everything) + 1))
    page = await stub.List(events_pb2.ListRequest(workflow_id="wf-1", tenant_id="t1", limit=1000))
    assert [e.seq for e in page.events] == everything


async def test_events_carry_the_envelope(stub: Stub) -> None:
    await create(stub)
    given = Timestamp(seconds=1_700_000_000, nanos=123_000)
    tool = common_pb2.EventDraft(
        type=common_pb2.EVENT_TYPE_TOOL_INVOKED,
        agent_id="agent-main",
        message="calculator: 12*7",
        payload_json=json.dumps({"tool_name": "calculator"}),
        timestamp=given,
        trace_id="0af7651916cd43dd8448eb211c80319c",
    )
    await append(stub, tool, draft("PROGRESS"))
    page = await stub.List(events_pb2.ListRequest(workflow_id="wf-1", tenant_id="t1"))
    first, second = page.events
    assert (first.workflow_id, first.seq, first.stream_id) == ("wf-1", 1, "1-0")
    assert type_name(first.type) == "TOOL_INVOKED"
    assert (first.agent_id, first.message) == ("agent-main", "calculator: 12*7")
    assert json.loads(first.payload_json) == {"tool_name": "calculator"}
    assert first.timestamp == given
    assert first.trace_id == "0af7651916cd43dd8448eb211c80319c"
    # No timestamp in the draft: the server stamps one.
    assert second.timestamp.seconds > 0
    assert (second.stream_id, second.payload_json) == ("2-0", "{}")


async def test_a_timestamp_out_of_range_is_an_invalid_argument(stub: Stub) -> None:
    await create(stub)
    late = common_pb2.EventDraft(
        type=common_pb2.EVENT_TYPE_PROGRESS, timestamp=Timestamp(seconds=10**12)
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await append(stub, late)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "timestamp is out of range" in str(refused.value.details())


async def test_late_subscriber_replays_then_follows_live(stub: Stub) -> None:
    await create(stub)
    await append(stub, draft("WORKFLOW_STARTED"), draft("THREAD_MESSAGE_DELTA", {"delta": "8"}))
    call = stub.Stream(events_pb2.StreamRequest(workflow_id="wf-1", tenant_id="t1"))
    received = await take(call, 2)
    assert [e.seq for e in received] == [1, 2]
    assert type_name(received[1].type) == "THREAD_MESSAGE_DELTA"  # ephemeral, from the hot tier
    await append(stub, draft("THREAD_MESSAGE_COMPLETED", {"content": "84"}), *FINISH)
    rest = await take(call, 3)
    assert [(e.seq, type_name(e.type)) for e in rest] == [
        (3, "THREAD_MESSAGE_COMPLETED"),
        (4, "WORKFLOW_COMPLETED"),
        (5, "STREAM_END"),
    ]
    assert await call.read() == grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


async def test_stream_from_the_middle_with_a_types_filter(stub: Stub) -> None:
    await create(stub)
    await append(
        stub,
        draft("TOOL_INVOKED"),
        draft("PROGRESS"),
        draft("TOOL_INVOKED"),
        draft("PROGRESS"),
        *FINISH,
    )
    events = await read_all(
        stub.Stream(
            events_pb2.StreamRequest(
                workflow_id="wf-1",
                tenant_id="t1",
                from_seq=2,
                types=[common_pb2.EVENT_TYPE_TOOL_INVOKED],
            )
        )
    )
    assert [(e.seq, type_name(e.type)) for e in events] == [(3, "TOOL_INVOKED"), (6, "STREAM_END")]


async def test_restarted_service_replays_from_sql_and_continues_numbering(
    server: RunningEvents, settings: Settings
) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub: Stub = events_pb2_grpc.EventServiceStub(channel)
        await create(stub)
        await append(stub, draft("WORKFLOW_STARTED"), draft("LLM_PARTIAL"), draft("PROGRESS"))
    await server.stop()

    restarted = RunningEvents(settings)  # new objects, same SQLite file, empty hot tier
    await restarted.start()
    try:
        async with grpc.aio.insecure_channel(restarted.target) as channel:
            stub = events_pb2_grpc.EventServiceStub(channel)
            call = stub.Stream(events_pb2.StreamRequest(workflow_id="wf-1", tenant_id="t1"))
            assert [e.seq for e in await take(call, 2)] == [1, 3]
            assert await append(stub, *FINISH) == [4, 5]
            assert [e.seq for e in await take(call, 2)] == [4, 5]
            assert await call.read() == grpc.aio.EOF
            workflow = await stub.GetWorkflow(
                events_pb2.GetWorkflowRequest(workflow_id="wf-1", tenant_id="t1")
            )
            assert (workflow.last_seq, workflow.status) == (5, common_pb2.WORKFLOW_STATUS_COMPLETED)
    finally:
        await restarted.stop()


async def test_workflow_reports_completion(stub: Stub) -> None:
    await create(stub)
    await append(
        stub,
        draft("WORKFLOW_STARTED"),
        draft(
            "WORKFLOW_COMPLETED",
            {"result": "84", "duration_ms": 900, "total_tokens": 120, "total_cost_usd": 0.25},
        ),
        draft("STREAM_END"),
    )
    workflow = await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id="wf-1", tenant_id="t1")
    )
    assert workflow.status == common_pb2.WORKFLOW_STATUS_COMPLETED
    assert (workflow.result, workflow.duration_ms, workflow.last_seq) == ("84", 900, 3)
    assert (workflow.usage.total_tokens, workflow.usage.cost_usd) == (120, 0.25)


async def test_workflow_reports_failure(stub: Stub) -> None:
    await create(stub)
    await append(
        stub,
        draft("WORKFLOW_STARTED"),
        draft("ERROR_OCCURRED", {"error_message": "model unreachable", "fatal": True}),
    )
    workflow = await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id="wf-1", tenant_id="t1")
    )
    assert (workflow.status, workflow.error) == (
        common_pb2.WORKFLOW_STATUS_FAILED,
        "model unreachable",
    )


async def test_health_reports_serving(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "shuttle.v1.EventService"):
        response = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_event_service(channel: grpc.aio.Channel) -> None:
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = [
        service.name
        async for response in responses
        for service in response.list_services_response.service
    ]
    assert "shuttle.v1.EventService" in names
    assert "grpc.health.v1.Health" in names
