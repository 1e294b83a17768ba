"""The real EventService over gRPC: tenant in metadata, idempotent appends, full results."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import grpc
import pytest

from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import events_pb2

from .helpers import draft

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub


async def test_tenant_from_metadata_alone(stub: Stub) -> None:
    created = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(query="q"), metadata=tenant_metadata("acme")
    )
    assert created.tenant_id == "acme"
    response = await stub.Append(
        events_pb2.AppendRequest(workflow_id=created.workflow_id, events=[draft("PROGRESS")]),
        metadata=tenant_metadata("acme"),
    )
    assert list(response.seqs) == [1]
    # The field alone names the same tenant, for callers that cannot set metadata.
    fetched = await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id=created.workflow_id, tenant_id="acme")
    )
    assert fetched.last_seq == 1


async def test_other_tenant_in_metadata_is_not_found(stub: Stub) -> None:
    created = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(), metadata=tenant_metadata("acme")
    )
    request = events_pb2.ListRequest(workflow_id=created.workflow_id)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.List(request, metadata=tenant_metadata("globex"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    stream = stub.Stream(
        events_pb2.StreamRequest(workflow_id=created.workflow_id),
        metadata=tenant_metadata("globex"),
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stream.read()
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_metadata_and_field_must_agree(stub: Stub) -> None:
    created = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(), metadata=tenant_metadata("acme")
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Append(
            events_pb2.AppendRequest(
                workflow_id=created.workflow_id, tenant_id="globex", events=[draft("PROGRESS")]
            ),
            metadata=tenant_metadata("acme"),
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "x-shuttle-tenant" in (caught.value.details() or "")
    fetched = await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id=created.workflow_id),
        metadata=tenant_metadata("acme"),
    )
    assert fetched.last_seq == 0  # nothing was stored


async def test_idempotent_retry_over_grpc(stub: Stub) -> None:
    created = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(), metadata=tenant_metadata("t1")
    )
    request = events_pb2.AppendRequest(
        workflow_id=created.workflow_id,
        events=[draft("PROGRESS"), draft("PROGRESS")],
        producer_id="executor-1",
        batch_seq=1,
    )
    first = await stub.Append(request, metadata=tenant_metadata("t1"))
    again = await stub.Append(request, metadata=tenant_metadata("t1"))
    assert list(first.seqs) == list(again.seqs) == [1, 2]
    page = await stub.List(
        events_pb2.ListRequest(workflow_id=created.workflow_id), metadata=tenant_metadata("t1")
    )
    assert [e.seq for e in page.events] == [1, 2]


async def test_bad_producer_id_is_invalid(stub: Stub) -> None:
    created = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(), metadata=tenant_metadata("t1")
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Append(
            events_pb2.AppendRequest(
                workflow_id=created.workflow_id,
                events=[draft("PROGRESS")],
                producer_id="no spaces allowed",
                batch_seq=1,
            ),
            metadata=tenant_metadata("t1"),
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "producer_id" in (caught.value.details() or "")


async def test_list_full_results_returns_the_whole_observation(stub: Stub) -> None:
    created = await stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(), metadata=tenant_metadata("t1")
    )
    whole = "x" * 5000
    await stub.Append(
        events_pb2.AppendRequest(
            workflow_id=created.workflow_id,
            events=[draft("TOOL_OBSERVATION", {"tool_name": "read", "result": whole})],
        ),
        metadata=tenant_metadata("t1"),
    )
    request = events_pb2.ListRequest(workflow_id=created.workflow_id)
    page = await stub.List(request, metadata=tenant_metadata("t1"))
    streamed = json.loads(page.events[0].payload_json)
    assert (len(streamed["result"]), streamed["truncated"]) == (2000, True)
    request.full_results = True
    full = await stub.List(request, metadata=tenant_metadata("t1"))
    assert json.loads(full.events[0].payload_json)["result"] == whole
