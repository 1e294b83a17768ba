"""The workflow log over gRPC as the command paths need it: follow, read control state, append."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import grpc

from services.executor.follower import (
    COMMAND_EVENT_TYPES,
    CommandSourceUnavailable,
    LogCommand,
)
from services.executor.grpc_clients import RETRYABLE_CODES
from shuttle.envelope import type_name, type_value
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

_CONTROL_TYPES = ("WORKFLOW_PAUSING", "WORKFLOW_PAUSED", "WORKFLOW_RESUMED", "WORKFLOW_CANCELLING")
_PAGE = 1000


def _command(event: common_pb2.Event) -> LogCommand:
    payload = json.loads(event.payload_json) if event.payload_json else {}
    return LogCommand(
        int(event.seq), type_name(event.type), payload if isinstance(payload, dict) else {}
    )


class GrpcCommandSource:
    """Follows a workflow's command events through EventService.Stream with a types filter."""

    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._stub = stub

    async def follow(
        self, workflow_id: str, tenant_id: str, from_seq: int
    ) -> AsyncIterator[LogCommand]:
        request = events_pb2.StreamRequest(
            workflow_id=workflow_id,
            tenant_id=tenant_id,
            from_seq=from_seq,
            types=[type_value(t) for t in COMMAND_EVENT_TYPES],
        )
        try:
            async for event in self._stub.Stream(request, metadata=tenant_metadata(tenant_id)):
                if type_name(event.type) == "STREAM_END":
                    return
                yield _command(event)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in RETRYABLE_CODES:
                raise CommandSourceUnavailable(f"{exc.code().name}: {exc.details()}") from exc
            raise


class GrpcWorkflowLog:
    """What Control and Interrupt read and write, through the EventService."""

    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._stub = stub

    async def status(self, workflow_id: str, tenant_id: str) -> str:
        workflow = await self._stub.GetWorkflow(
            events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=tenant_id),
            metadata=tenant_metadata(tenant_id),
        )
        return common_pb2.WorkflowStatus.Name(workflow.status).removeprefix("WORKFLOW_STATUS_")

    async def control_events(self, workflow_id: str, tenant_id: str) -> Sequence[LogCommand]:
        found: list[LogCommand] = []
        from_seq = 1
        while from_seq:
            page = await self._stub.List(
                events_pb2.ListRequest(
                    workflow_id=workflow_id,
                    tenant_id=tenant_id,
                    from_seq=from_seq,
                    limit=_PAGE,
                    types=[type_value(t) for t in _CONTROL_TYPES],
                ),
                metadata=tenant_metadata(tenant_id),
            )
            found += [_command(e) for e in page.events]
            from_seq = int(page.next_seq)
        return found

    async def append(
        self, workflow_id: str, tenant_id: str, type_: str, message: str, payload: Mapping[str, Any]
    ) -> int:
        request = events_pb2.AppendRequest(
            workflow_id=workflow_id,
            tenant_id=tenant_id,
            events=[
                common_pb2.EventDraft(
                    type=type_value(type_),
                    message=message,
                    payload_json=json.dumps(dict(payload), ensure_ascii=False),
                )
            ],
            # A command is its own producer: a retried RPC must not append it twice.
            producer_id=f"command:{uuid.uuid4().hex}",
            batch_seq=1,
        )
        response = await self._stub.Append(request, metadata=tenant_metadata(tenant_id))
        return int(response.seqs[0])
