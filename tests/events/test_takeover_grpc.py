"""Takeovers over gRPC and through the events client: a run created leased, released, claimed
by another owner, and its old owner's appends refused with ABORTED (Append, AppendStream, the
client's producer raising LogFenced without resending)."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import grpc
import pytest
from prometheus_client import REGISTRY

from shuttle.events_client import EventsClient
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2
from shuttle.workflow_log import AppendRefused, EventDraft, LogFenced

from .helpers import draft
from .test_append_stream import Appender, stored

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub

TENANT = "t1"
SPEC = json.dumps({"mode": "SIMPLE", "budget_tokens": 1000})
APPEND = "/shuttle.v1.EventService/Append"
APPEND_STREAM = "/shuttle.v1.EventService/AppendStream"


def aborted(method: str) -> float:
    """Calls (AppendStream: batches) of `method` this process's server ended ABORTED."""
    labels = {"method": method, "code": "ABORTED"}
    return REGISTRY.get_sample_value("shuttle_grpc_server_handling_seconds_count", labels) or 0.0


async def handed_over(client: EventsClient, workflow_id: str = "wf-1") -> events_pb2.Workflow:
    """A run exec-a created leased (epoch 1) with one event, released, and claimed by exec-b."""
    created = await client.create_workflow(
        TENANT,
        query="q",
        workflow_id=workflow_id,
        spec_json=SPEC,
        lease_owner="exec-a",
        lease_ttl_seconds=60,
    )
    assert created == workflow_id
    producer = client.producer(workflow_id, TENANT, name="run", lease_epoch=1)
    assert await producer.append([EventDraft("WORKFLOW_STARTED", "started")]) == [1]
    released = await client.release_lease(workflow_id, TENANT, "exec-a", 1)
    assert (released.lease_owner, released.lease_epoch) == ("", 1)
    (claimed,) = await client.claim_runs("exec-b", 60, 10)
    return claimed


@pytest.fixture
def client(channel: grpc.aio.Channel) -> EventsClient:
    return EventsClient(channel, retry_seconds=30)


async def test_a_run_is_created_leased_handed_over_and_renewed_at_its_epoch(
    client: EventsClient,
) -> None:
    claimed = await handed_over(client)
    assert (claimed.workflow_id, claimed.tenant_id) == ("wf-1", TENANT)
    assert claimed.lease_owner == "exec-b"
    assert (claimed.lease_epoch, claimed.takeovers, claimed.spec_json) == (2, 0, SPEC)
    assert claimed.status == common_pb2.WORKFLOW_STATUS_RUNNING
    renewed = await client.renew_lease("wf-1", TENANT, "exec-b", 30, epoch=2)
    assert (renewed.lease_owner, renewed.lease_epoch, renewed.spec_json) == ("exec-b", 2, "")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.renew_lease("wf-1", TENANT, "exec-a", 30, epoch=1)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "taken over" in (refused.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.release_lease("wf-1", TENANT, "exec-a", 1)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    workflow = await client.get_workflow("wf-1", TENANT)
    assert (workflow.lease_epoch, workflow.spec_json) == (2, SPEC)
    assert await client.claim_runs("exec-c", 60, 10) == []


async def test_bad_claims_and_releases_are_invalid_arguments(stub: Stub) -> None:
    calls: list[tuple[Awaitable[object], str]] = [
        (stub.ClaimRuns(events_pb2.ClaimRunsRequest(owner="exec-a", ttl_ms=1000)), "limit"),
        (stub.ClaimRuns(events_pb2.ClaimRunsRequest(owner="a b", ttl_ms=1, limit=1)), "owner"),
        (
            stub.ReleaseLease(
                events_pb2.ReleaseLeaseRequest(workflow_id="wf-1", owner="exec-a"),
                metadata=tenant_metadata(TENANT),
            ),
            "epoch is required",
        ),
        (
            stub.CreateWorkflow(
                events_pb2.CreateWorkflowRequest(spec_json="null"),
                metadata=tenant_metadata(TENANT),
            ),
            "spec_json must be a JSON object",
        ),
    ]
    for call, words in calls:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert words in (refused.value.details() or "")


async def test_the_old_owners_append_is_aborted_as_fenced(stub: Stub, client: EventsClient) -> None:
    await handed_over(client)
    request = events_pb2.AppendRequest(
        workflow_id="wf-1", events=[draft("PROGRESS")], producer_id="run-a", batch_seq=9
    )
    request.lease_epoch = 1
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Append(request, metadata=tenant_metadata(TENANT))
    assert refused.value.code() == grpc.StatusCode.ABORTED
    details = refused.value.details() or ""
    assert details.startswith("fenced: ") and "epoch 2" in details and "lease epoch 1" in details
    request.lease_epoch = 2
    assert list((await stub.Append(request, metadata=tenant_metadata(TENANT))).seqs) == [2]


async def test_the_old_owners_batches_on_an_append_stream_are_aborted(
    stub: Stub, client: EventsClient
) -> None:
    await handed_over(client)
    appender = Appender(stub)
    stale = appender.send("wf-1", draft("PROGRESS"), lease_epoch=1)
    ephemeral = appender.send("wf-1", draft("THREAD_MESSAGE_DELTA"), lease_epoch=1)
    answers = await appender.answers(2)
    for call_id in (stale, ephemeral):
        assert answers[call_id].error.code == grpc.StatusCode.ABORTED.value[0]
        assert answers[call_id].error.message.startswith("fenced: ")
        assert not answers[call_id].seqs
    current = appender.send("wf-1", draft("PROGRESS"), lease_epoch=2)  # the call goes on
    assert list((await appender.answer(current)).seqs) == [2]
    await appender.close()
    assert [e.seq for e in await stored(stub, "wf-1")] == [1, 2]


@pytest.mark.parametrize("shared_stream", [False, True], ids=["append", "append-stream"])
async def test_the_producer_raises_log_fenced_and_does_not_resend(
    stub: Stub, client: EventsClient, shared_stream: bool
) -> None:
    await handed_over(client)
    method = APPEND_STREAM if shared_stream else APPEND
    before = aborted(method)
    old = client.producer(
        "wf-1", TENANT, name="run", shared_stream=shared_stream, lease_epoch=1, retry_seconds=30
    )
    with pytest.raises(LogFenced) as fenced:
        await old.append([EventDraft("PROGRESS", "stale")])
    assert isinstance(fenced.value, AppendRefused) and fenced.value.status == "ABORTED"
    assert "epoch 2" in str(fenced.value) and "lease epoch 1" in str(fenced.value)
    assert aborted(method) == before + 1  # one attempt: a fenced batch is never resent
    new = client.producer("wf-1", TENANT, name="run", shared_stream=shared_stream, lease_epoch=2)
    assert await new.append([EventDraft("PROGRESS", "current")]) == [2]
    assert [e.seq for e in await stored(stub, "wf-1")] == [1, 2]
    await client.close()
