"""The workflow log over gRPC as the command paths need it: follow, read control state, append."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import grpc

from services.executor.follower import (
    CommandSourceUnavailable,
    FeedItem,
    LogCommand,
    Watch,
    WatchRequest,
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
    """Sessions of EventService.FollowCommands: many workflows' commands over one stream."""

    def __init__(self, stub: events_pb2_grpc.EventServiceAsyncStub) -> None:
        self._stub = stub

    async def follow(self, requests: AsyncIterator[WatchRequest]) -> AsyncIterator[FeedItem]:
        call = self._stub.FollowCommands(_watch_messages(requests))
        try:
            async for message in call:
                yield _feed_item(message)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in RETRYABLE_CODES:
                raise CommandSourceUnavailable(f"{exc.code().name}: {exc.details()}") from exc
            raise
        finally:
            call.cancel()


async def _watch_messages(
    requests: AsyncIterator[WatchRequest],
) -> AsyncIterator[events_pb2.CommandWatch]:
    async for request in requests:
        if isinstance(request, Watch):
            yield events_pb2.CommandWatch(
                watch=events_pb2.WatchCommands(
                    workflow_id=request.workflow_id,
                    tenant_id=request.tenant_id,
                    from_seq=request.from_seq,
                )
            )
        else:
            yield events_pb2.CommandWatch(
                unwatch=events_pb2.UnwatchCommands(workflow_id=request.workflow_id)
            )


def _feed_item(message: events_pb2.CommandFeed) -> FeedItem:
    error = ""
    retryable = False
    if message.HasField("error"):
        code = _STATUS_CODES.get(message.error.code, grpc.StatusCode.UNKNOWN)
        error = f"{code.name}: {message.error.message}"
        retryable = code in RETRYABLE_CODES
    return FeedItem(
        message.workflow_id,
        tuple(_command(e) for e in message.events),
        ended=message.ended,
        error=error,
        retryable=retryable,
    )


_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


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
