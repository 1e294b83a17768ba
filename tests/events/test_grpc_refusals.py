"""The real EventService over gRPC refuses what it must, with the status that says why: invalid
appends, unknown workflows, a closed log, duplicate ids, bad filters, other tenants."""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable
from typing import TYPE_CHECKING

import grpc
import pytest

from shuttle.v1 import common_pb2, events_pb2

from .helpers import draft
from .test_grpc_api import FINISH, append, create, read_all

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub as Stub


async def expect_error(
    call: Awaitable[object] | AsyncIterable[common_pb2.Event], code: grpc.StatusCode, fragment: str
) -> None:
    """The unary or streaming call fails with `code` and a message containing `fragment`."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        if isinstance(call, AsyncIterable):
            await read_all(call)
        else:
            await call
    assert caught.value.code() == code
    assert fragment in (caught.value.details() or "")


@pytest.mark.parametrize(
    ("drafts", "fragment"),
    [
        ([], "events is empty"),
        ([draft("PROGRESS")] * 1001, "batch has 1001 events; at most 1000"),
        ([draft("PROGRESS", {"blob": "x" * (4 * 1024 * 1024)})], "at most 4194304 (4 MiB)"),
        ([draft("PROGRESS"), common_pb2.EventDraft()], "event 1: type EVENT_TYPE_UNSPECIFIED"),
        (
            [common_pb2.EventDraft(type=common_pb2.EventType.ValueType(99))],
            "event 0: type EventType(99)",
        ),
        (
            [
                draft("PROGRESS"),
                common_pb2.EventDraft(type=common_pb2.EVENT_TYPE_PROGRESS, payload_json='"x"'),
            ],
            "event 1: payload_json must be a JSON object, not a string",
        ),
        (
            [common_pb2.EventDraft(type=common_pb2.EVENT_TYPE_PROGRESS, payload_json="{")],
            "event 0: payload_json is not valid JSON",
        ),
    ],
)
async def test_invalid_appends(
    stub: Stub, drafts: list[common_pb2.EventDraft], fragment: str
) -> None:
    await create(stub)
    await append(stub, draft("PROGRESS"))
    await expect_error(
        stub.Append(events_pb2.AppendRequest(workflow_id="wf-1", tenant_id="t1", events=drafts)),
        grpc.StatusCode.INVALID_ARGUMENT,
        fragment,
    )
    assert await append(stub, draft("PROGRESS")) == [2]  # nothing stored, no seq consumed


async def test_unknown_workflow_is_not_found(stub: Stub) -> None:
    await expect_error(
        stub.Append(
            events_pb2.AppendRequest(
                workflow_id="wf-none", tenant_id="t1", events=[draft("PROGRESS")]
            )
        ),
        grpc.StatusCode.NOT_FOUND,
        "workflow 'wf-none' not found",
    )


async def test_append_after_stream_end_fails_precondition(stub: Stub) -> None:
    await create(stub)
    await append(stub, *FINISH)
    await expect_error(
        stub.Append(
            events_pb2.AppendRequest(workflow_id="wf-1", tenant_id="t1", events=[draft("PROGRESS")])
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        "has ended",
    )


async def test_duplicate_workflow_id_already_exists(stub: Stub) -> None:
    await create(stub)
    await expect_error(
        stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(tenant_id="t1", workflow_id="wf-1")),
        grpc.StatusCode.ALREADY_EXISTS,
        "workflow 'wf-1' already exists",
    )


async def test_list_limit_above_a_thousand_is_invalid(stub: Stub) -> None:
    await create(stub)
    await expect_error(
        stub.List(events_pb2.ListRequest(workflow_id="wf-1", tenant_id="t1", limit=1001)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "limit must be at most 1000 (got 1001)",
    )


async def test_stream_with_unspecified_type_filter_is_invalid(stub: Stub) -> None:
    await create(stub)
    await expect_error(
        stub.Stream(
            events_pb2.StreamRequest(
                workflow_id="wf-1", tenant_id="t1", types=[common_pb2.EVENT_TYPE_UNSPECIFIED]
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "types[0]: EVENT_TYPE_UNSPECIFIED is not an event type",
    )


async def test_missing_tenant_is_invalid(stub: Stub) -> None:
    await expect_error(
        stub.CreateWorkflow(events_pb2.CreateWorkflowRequest(workflow_id="wf-1")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "tenant_id is required",
    )


async def test_other_tenant_gets_not_found_on_every_rpc(stub: Stub) -> None:
    await create(stub)
    await append(stub, draft("PROGRESS"))
    fragment = "workflow 'wf-1' not found"
    not_found = grpc.StatusCode.NOT_FOUND
    await expect_error(
        stub.GetWorkflow(events_pb2.GetWorkflowRequest(workflow_id="wf-1", tenant_id="t2")),
        not_found,
        fragment,
    )
    await expect_error(
        stub.Append(
            events_pb2.AppendRequest(workflow_id="wf-1", tenant_id="t2", events=[draft("PROGRESS")])
        ),
        not_found,
        fragment,
    )
    await expect_error(
        stub.Stream(events_pb2.StreamRequest(workflow_id="wf-1", tenant_id="t2")),
        not_found,
        fragment,
    )
    await expect_error(
        stub.List(events_pb2.ListRequest(workflow_id="wf-1", tenant_id="t2")), not_found, fragment
    )
    # Same answer as for a workflow that does not exist at all.
    await expect_error(
        stub.GetWorkflow(events_pb2.GetWorkflowRequest(workflow_id="wf-2", tenant_id="t1")),
        not_found,
        "workflow 'wf-2' not found",
    )
    assert await append(stub, draft("PROGRESS")) == [2]
