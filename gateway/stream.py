"""The typed SSE dialect: `id: seq`, `event: TYPE`, `data: envelope`, closed after STREAM_END."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

import grpc
from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway.errors import ApiError
from gateway.tasks import Clients, Tenant, parse_types
from shuttle.envelope import to_json_dict, type_name
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2

router = APIRouter(prefix="/api/v1")

PING_SECONDS = 15
RETRY_MS = 3_000


def resume_point(header: str | None, query: str | None) -> int:
    """The seq after the client's last one; the header wins, as EventSource sends it."""
    raw = header if header not in (None, "") else query
    if raw in (None, ""):
        return 1
    try:
        last = int(raw)
    except ValueError:
        raise ApiError(
            400, "invalid_argument", f"Last-Event-ID must be a seq, got {raw!r}"
        ) from None
    if last < 0:
        raise ApiError(400, "invalid_argument", "Last-Event-ID must not be negative")
    return last + 1


def frame(event: common_pb2.Event, first: bool) -> ServerSentEvent:
    return ServerSentEvent(
        data=json.dumps(to_json_dict(event), ensure_ascii=False),
        event=type_name(event.type),
        id=str(event.seq),
        retry=RETRY_MS if first else None,
    )


@router.get("/stream/sse")
async def stream_sse(
    workflow_id: Annotated[str, Query(min_length=1)],
    tenant: Tenant,
    clients: Clients,
    types: str | None = None,
    last_event_id: str | None = None,
    last_event_id_header: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> EventSourceResponse:
    from_seq = resume_point(last_event_id_header, last_event_id)
    wanted = parse_types(types)
    # Check before answering 200, so a wrong id is a JSON 404 and not an empty stream.
    await clients.events.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=tenant),
        metadata=tenant_metadata(tenant),
    )
    call = clients.events.Stream(
        events_pb2.StreamRequest(
            workflow_id=workflow_id, tenant_id=tenant, from_seq=from_seq, types=wanted
        ),
        metadata=tenant_metadata(tenant),
    )

    async def frames() -> AsyncIterator[ServerSentEvent]:
        # A client that disconnects cancels this generator and with it the gRPC stream;
        # the run itself is untouched.
        first = True
        try:
            async for event in call:
                yield frame(event, first)
                first = False
        except grpc.aio.AioRpcError as exc:
            error = {"error": {"code": exc.code().name.lower(), "message": exc.details()}}
            yield ServerSentEvent(data=json.dumps(error), event="error")
        finally:
            call.cancel()

    return EventSourceResponse(
        frames(),
        ping=PING_SECONDS,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
