"""Who may write what to a workflow's log: the events service, as its process builds it with
an internal token, refuses a component's append of events that are not its own to write."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from services.events.__main__ import build
from shuttle.grpc_auth import EXECUTOR, GATEWAY, PLANNER, TOOLS, ChannelAuth
from shuttle.grpc_client import open_channel, tenant_metadata
from shuttle.grpc_server import GrpcService
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc
from tests.events.helpers import draft

TOKEN = "events-roles-test-token-0123456789"
TENANT = "t1"


class Events:
    def __init__(self, settings: Settings, service: GrpcService) -> None:
        self.settings = settings
        self.service = service
        self._channels: list[grpc.aio.Channel] = []

    def stub(self, role: str) -> events_pb2_grpc.EventServiceAsyncStub:
        auth = ChannelAuth.for_component(self.settings, role)
        self._channels.append(open_channel(f"127.0.0.1:{self.service.port}", auth))
        return events_pb2_grpc.EventServiceStub(self._channels[-1])

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()


@pytest.fixture
async def events(tmp_path: Path) -> AsyncIterator[Events]:
    settings = Settings(internal_token=TOKEN, database_url="", data_dir=tmp_path)
    service = await build(settings)
    await service.start("127.0.0.1", 0)
    running = Events(settings, service)
    yield running
    await running.close()
    await service.stop(0)


async def running_workflow(events: Events) -> str:
    executor = events.stub(EXECUTOR)
    created = await executor.CreateWorkflow(events_pb2.CreateWorkflowRequest(tenant_id=TENANT))
    await executor.Append(
        events_pb2.AppendRequest(
            workflow_id=created.workflow_id,
            tenant_id=TENANT,
            events=[draft("WORKFLOW_STARTED"), draft("AGENT_THINKING")],
        )
    )
    return str(created.workflow_id)


async def append(
    stub: events_pb2_grpc.EventServiceAsyncStub, workflow_id: str, *drafts: common_pb2.EventDraft
) -> list[int]:
    reply = await stub.Append(
        events_pb2.AppendRequest(workflow_id=workflow_id, tenant_id=TENANT, events=drafts)
    )
    return list(reply.seqs)


async def refused(stub: events_pb2_grpc.EventServiceAsyncStub, workflow_id: str, kind: str) -> str:
    """The details of the PERMISSION_DENIED an append of one `kind` event gets."""
    payload = {"fatal": True} if kind == "ERROR_OCCURRED" else {"result": "forged"}
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await append(stub, workflow_id, draft(kind, payload))
    assert failure.value.code() == grpc.StatusCode.PERMISSION_DENIED
    return failure.value.details() or ""


async def test_a_forged_completion_from_any_component_but_the_executor_is_refused(
    events: Events,
) -> None:
    workflow_id = await running_workflow(events)
    reader = events.stub(GATEWAY)
    before = await reader.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=TENANT)
    )
    for role in (GATEWAY, TOOLS, PLANNER):
        details = await refused(events.stub(role), workflow_id, "WORKFLOW_COMPLETED")
        if role == GATEWAY:
            assert "/shuttle.v1.EventService/Append is not open to the gateway role" in details
        else:
            assert f"the {role} role may not append WORKFLOW_COMPLETED" in details
        # A fatal error would end the run as surely as a completion.
        await refused(events.stub(role), workflow_id, "ERROR_OCCURRED")
    after = await reader.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=TENANT)
    )
    assert after.status == before.status == common_pb2.WORKFLOW_STATUS_RUNNING
    assert after.last_seq == before.last_seq == 2
    page = await reader.List(events_pb2.ListRequest(workflow_id=workflow_id, tenant_id=TENANT))
    assert [e.seq for e in page.events] == [1, 2]


async def test_the_approval_gate_writes_its_events_and_only_it_does(events: Events) -> None:
    workflow_id = await running_workflow(events)
    tools = events.stub(TOOLS)
    approval = {"approval_id": "ap-1", "tool_name": "shell"}
    seqs = await append(
        tools,
        workflow_id,
        draft("APPROVAL_REQUESTED", approval),
        draft("WAITING", approval),
        draft("APPROVAL_DECISION", {**approval, "decision": "approved"}),
    )
    assert seqs == [3, 4, 5]
    details = await refused(events.stub(EXECUTOR), workflow_id, "APPROVAL_DECISION")
    assert "the executor role may not append APPROVAL_DECISION" in details
    await refused(tools, workflow_id, "TOOL_INVOKED")


async def test_the_planner_appends_its_retry_reports_and_nothing_fatal(events: Events) -> None:
    workflow_id = await running_workflow(events)
    planner = events.stub(PLANNER)
    seqs = await append(
        planner,
        workflow_id,
        draft("ERROR_OCCURRED", {"recoverable": True, "fatal": False}),
        draft("ERROR_RECOVERY", {"recovery_action": "retry", "success": True}),
    )
    assert seqs == [3, 4]
    details = await refused(planner, workflow_id, "ERROR_OCCURRED")
    assert "the planner role may not append ERROR_OCCURRED" in details
    await refused(planner, workflow_id, "THREAD_MESSAGE_COMPLETED")


async def test_the_executor_alone_creates_workflows_and_renews_their_leases(
    events: Events,
) -> None:
    workflow_id = await running_workflow(events)
    renew = events_pb2.RenewLeaseRequest(
        workflow_id=workflow_id, tenant_id=TENANT, owner="exec-a", ttl_ms=5000
    )
    for role in (GATEWAY, TOOLS, PLANNER):
        stub = events.stub(role)
        for call in (
            stub.RenewLease(renew),
            stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(tenant_id=TENANT)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await call
            assert failure.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert f"the {role} role" in (failure.value.details() or "")
    leased = await events.stub(EXECUTOR).RenewLease(renew)
    assert leased.lease_owner == "exec-a"


async def test_only_the_executor_claims_and_releases_runs(events: Events) -> None:
    executor = events.stub(EXECUTOR)
    created = await executor.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(
            tenant_id=TENANT, lease_owner="exec-a", lease_ttl_ms=60_000
        )
    )
    release = events_pb2.ReleaseLeaseRequest(
        workflow_id=created.workflow_id, tenant_id=TENANT, owner="exec-a", epoch=1
    )
    claim = events_pb2.ClaimRunsRequest(owner="mallory", ttl_ms=3_600_000, limit=100)
    for role in (GATEWAY, TOOLS, PLANNER):
        stub = events.stub(role)
        for call in (stub.ReleaseLease(release), stub.ClaimRuns(claim)):
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await call
            assert failure.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert f"is not open to the {role} role" in (failure.value.details() or "")
    get = events_pb2.GetWorkflowRequest(workflow_id=created.workflow_id, tenant_id=TENANT)
    untouched = await events.stub(GATEWAY).GetWorkflow(get)
    assert (untouched.lease_owner, untouched.lease_epoch) == ("exec-a", 1)
    # The service is still up, and the executor hands the run over and takes it.
    await executor.ReleaseLease(release)
    claimed = await executor.ClaimRuns(
        events_pb2.ClaimRunsRequest(owner="exec-b", ttl_ms=60_000, limit=10)
    )
    assert [(w.workflow_id, w.lease_epoch) for w in claimed.workflows] == [(created.workflow_id, 2)]


async def test_append_stream_is_the_executors_and_refuses_its_batches_of_approvals(
    events: Events,
) -> None:
    workflow_id = await running_workflow(events)

    async def drain(
        queue: asyncio.Queue[events_pb2.AppendCall | None],
    ) -> AsyncIterator[events_pb2.AppendCall]:
        while (item := await queue.get()) is not None:
            yield item

    def batch(call_id: int, kind: str) -> events_pb2.AppendCall:
        request = events_pb2.AppendRequest(
            workflow_id=workflow_id, tenant_id=TENANT, events=[draft(kind)]
        )
        return events_pb2.AppendCall(id=call_id, request=request)

    never_sent: asyncio.Queue[events_pb2.AppendCall | None] = asyncio.Queue()
    tools_call = events.stub(TOOLS).AppendStream(
        drain(never_sent), metadata=tenant_metadata(TENANT)
    )
    # Refused before it reads a batch: the caller need not send one to hear why.
    assert await tools_call.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "AppendStream is not open to the tools role" in await tools_call.details()

    queue: asyncio.Queue[events_pb2.AppendCall | None] = asyncio.Queue()
    call = events.stub(EXECUTOR).AppendStream(drain(queue), metadata=tenant_metadata(TENANT))
    queue.put_nowait(batch(1, "APPROVAL_REQUESTED"))
    denied = await call.read()
    assert isinstance(denied, events_pb2.AppendAnswer) and denied.id == 1
    assert denied.error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert "the executor role may not append APPROVAL_REQUESTED" in denied.error.message
    queue.put_nowait(batch(2, "AGENT_THINKING"))  # the call goes on
    accepted = await call.read()
    assert isinstance(accepted, events_pb2.AppendAnswer) and list(accepted.seqs) == [3]
    queue.put_nowait(None)
    assert await call.code() == grpc.StatusCode.OK


async def test_only_the_executor_creates_workflows_over_append_stream(events: Events) -> None:
    async def one_create() -> AsyncIterator[events_pb2.AppendCall]:
        create = events_pb2.CreateWorkflowRequest(tenant_id=TENANT, workflow_id="wf-forged")
        yield events_pb2.AppendCall(id=1, create=create)

    for role in (GATEWAY, TOOLS, PLANNER):
        call = events.stub(role).AppendStream(one_create(), metadata=tenant_metadata(TENANT))
        assert await call.code() == grpc.StatusCode.PERMISSION_DENIED, role
    lookup = events_pb2.GetWorkflowRequest(workflow_id="wf-forged", tenant_id=TENANT)
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await events.stub(GATEWAY).GetWorkflow(lookup)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    made = [answer async for answer in events.stub(EXECUTOR).AppendStream(one_create())]
    assert [answer.workflow.workflow_id for answer in made] == ["wf-forged"]
