"""DeleteWorkflows over real gRPC: whole workflows of the caller's tenant, nothing else."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
import pytest

from shuttle.v1 import events_pb2

from .helpers import draft
from .test_grpc_api import FINISH, append, create

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub


async def test_a_tenant_deletes_its_workflows_and_only_its_own(stub: Stub) -> None:
    await create(stub, "wf-mine", tenant="t1")
    await create(stub, "wf-theirs", tenant="t2")
    await append(stub, draft("WORKFLOW_STARTED"), *FINISH, workflow_id="wf-mine")

    refused = await stub.DeleteWorkflows(
        events_pb2.DeleteWorkflowsRequest(tenant_id="t2", workflow_ids=["wf-mine"])
    )
    assert list(refused.deleted) == [] and refused.events_deleted == 0
    done = await stub.DeleteWorkflows(
        events_pb2.DeleteWorkflowsRequest(
            tenant_id="t1", workflow_ids=["wf-mine", "wf-theirs", "wf-unknown"]
        )
    )
    assert list(done.deleted) == ["wf-mine"] and done.events_deleted == 3

    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await stub.GetWorkflow(events_pb2.GetWorkflowRequest(workflow_id="wf-mine", tenant_id="t1"))
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as history:
        await stub.List(events_pb2.ListRequest(workflow_id="wf-mine", tenant_id="t1"))
    assert history.value.code() == grpc.StatusCode.NOT_FOUND
    kept = await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id="wf-theirs", tenant_id="t2")
    )
    assert kept.workflow_id == "wf-theirs"


async def test_bad_ids_are_refused_before_anything_is_deleted(stub: Stub) -> None:
    await create(stub, "wf-keep", tenant="t1")
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.DeleteWorkflows(
            events_pb2.DeleteWorkflowsRequest(tenant_id="t1", workflow_ids=["wf-keep", "../x"])
        )
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "workflow_id" in (failure.value.details() or "")
    await stub.GetWorkflow(events_pb2.GetWorkflowRequest(workflow_id="wf-keep", tenant_id="t1"))
