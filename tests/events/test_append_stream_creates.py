"""Workflows created over EventService.AppendStream: CreateWorkflow's checks and answer, as a
message on the producer's open call."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from shuttle.v1 import events_pb2

from .test_append_stream import Appender, stored
from .test_grpc_api import create

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub


async def test_a_workflow_created_over_the_call_takes_its_batches(stub: Stub) -> None:
    appender = Appender(stub)
    made = await appender.answer(
        appender.send_create(query="12*7?", lease_owner="executor-1", lease_ttl_ms=5000)
    )
    assert not made.HasField("error") and not made.seqs
    workflow = made.workflow
    assert workflow.workflow_id.startswith("wf-") and workflow.tenant_id == "t1"
    assert (workflow.lease_owner, workflow.lease_epoch) == ("executor-1", 1)
    found = await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id=workflow.workflow_id, tenant_id="t1")
    )
    assert (found.query, found.lease_owner) == ("12*7?", "executor-1")
    appended = await appender.answer(appender.send(workflow.workflow_id))
    assert list(appended.seqs) == [1]
    assert [e.seq for e in await stored(stub, workflow.workflow_id)] == [1]
    await appender.close()


async def test_a_refused_creation_is_answered_with_its_error_and_the_call_goes_on(
    stub: Stub,
) -> None:
    await create(stub, "wf-taken")
    appender = Appender(stub, tenant="t1")
    refused = {
        appender.send_create("wf-taken"): grpc.StatusCode.ALREADY_EXISTS,
        appender.send_create(tenant="t2"): grpc.StatusCode.INVALID_ARGUMENT,  # not the call's
        appender.send_create(lease_ttl_ms=5000): grpc.StatusCode.INVALID_ARGUMENT,  # no owner
        appender.send_create("wf bad id"): grpc.StatusCode.INVALID_ARGUMENT,
        appender.send_create(spec_json="[1, 2]"): grpc.StatusCode.INVALID_ARGUMENT,
    }
    answers = await appender.answers(len(refused))
    for call_id, code in refused.items():
        answer = answers[call_id]
        assert answer.error.code == code.value[0], answer
        assert answer.error.message and not answer.HasField("workflow")
    taken = await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id="wf-taken", tenant_id="t1")
    )
    assert taken.query == "12*7?"  # the first creation's row, untouched
    made = await appender.answer(appender.send_create("wf-new", tenant=""))  # the metadata's
    assert made.workflow.workflow_id == "wf-new" and made.workflow.tenant_id == "t1"
    await appender.close()
