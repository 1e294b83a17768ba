"""gRPC adapter: shuttle.v1.EventService on top of EventLog (protobuf <-> domain only)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Iterable
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from shuttle.envelope import stream_id, type_name, type_value
from shuttle.telemetry import current_trace_id
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

from .errors import AlreadyExists, EventsError, FailedPrecondition, InvalidArgument, NotFound
from .log import EventLog
from .records import NewEvent, StoredEvent, WorkflowRecord, WorkflowStatus

log = logging.getLogger(__name__)

SERVICE_NAME: str = events_pb2.DESCRIPTOR.services_by_name["EventService"].full_name

_T = TypeVar("_T")
Context = grpc.aio.ServicerContext[Any, Any]

_CODES: dict[type[EventsError], grpc.StatusCode] = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
}


class EventServiceServicer(events_pb2_grpc.EventServiceServicer):
    """Each RPC converts its request, calls EventLog, and converts the answer back."""

    def __init__(self, event_log: EventLog) -> None:
        self._log = event_log

    async def CreateWorkflow(
        self,
        request: events_pb2.CreateWorkflowRequest,
        context: grpc.aio.ServicerContext[events_pb2.CreateWorkflowRequest, events_pb2.Workflow],
    ) -> events_pb2.Workflow:
        record = await _call(
            context,
            self._log.create_workflow(
                tenant_id=request.tenant_id,
                owner=request.owner,
                query=request.query,
                session_id=request.session_id,
                workflow_id=request.workflow_id,
            ),
        )
        return workflow_message(record)

    async def GetWorkflow(
        self,
        request: events_pb2.GetWorkflowRequest,
        context: grpc.aio.ServicerContext[events_pb2.GetWorkflowRequest, events_pb2.Workflow],
    ) -> events_pb2.Workflow:
        record = await _call(
            context, self._log.get_workflow(request.workflow_id, request.tenant_id)
        )
        return workflow_message(record)

    async def Append(
        self,
        request: events_pb2.AppendRequest,
        context: grpc.aio.ServicerContext[events_pb2.AppendRequest, events_pb2.AppendResponse],
    ) -> events_pb2.AppendResponse:
        batch = [new_event(draft) for draft in request.events]
        seqs = await _call(context, self._log.append(request.workflow_id, request.tenant_id, batch))
        return events_pb2.AppendResponse(seqs=seqs)

    async def Stream(
        self,
        request: events_pb2.StreamRequest,
        context: grpc.aio.ServicerContext[events_pb2.StreamRequest, common_pb2.Event],
    ) -> AsyncIterator[common_pb2.Event]:
        events = self._log.stream(
            request.workflow_id,
            request.tenant_id,
            from_seq=request.from_seq,
            types=_type_names(request.types),
        )
        try:
            async for event in events:
                yield event_message(event)
        except (EventsError, SQLAlchemyError) as exc:
            await _abort(context, exc)

    async def List(
        self,
        request: events_pb2.ListRequest,
        context: grpc.aio.ServicerContext[events_pb2.ListRequest, events_pb2.ListResponse],
    ) -> events_pb2.ListResponse:
        page = await _call(
            context,
            self._log.list_events(
                request.workflow_id,
                request.tenant_id,
                from_seq=request.from_seq,
                limit=request.limit,
                types=_type_names(request.types),
            ),
        )
        return events_pb2.ListResponse(
            events=[event_message(event) for event in page.events], next_seq=page.next_seq
        )


def new_event(draft: common_pb2.EventDraft) -> NewEvent:
    """A producer's draft as a domain event; the log validates it."""
    return NewEvent(
        type=_type_name(draft.type),
        agent_id=draft.agent_id,
        message=draft.message,
        payload_json=draft.payload_json,
        timestamp=draft.timestamp.ToDatetime(tzinfo=UTC) if draft.HasField("timestamp") else None,
        # The append's own span continues the producer's trace, so an event the producer did
        # not stamp still names the trace it belongs to.
        trace_id=draft.trace_id or current_trace_id(),
    )


def event_message(event: StoredEvent) -> common_pb2.Event:
    return common_pb2.Event(
        workflow_id=event.workflow_id,
        type=type_value(event.type),
        agent_id=event.agent_id,
        message=event.message,
        timestamp=_timestamp(event.timestamp),
        seq=event.seq,
        stream_id=stream_id(event.seq),
        payload_json=event.payload_json,
        trace_id=event.trace_id,
    )


def workflow_message(record: WorkflowRecord) -> events_pb2.Workflow:
    return events_pb2.Workflow(
        workflow_id=record.workflow_id,
        tenant_id=record.tenant_id,
        owner=record.owner,
        status=_STATUS_VALUES[record.status],
        last_seq=record.last_seq,
        query=record.query,
        session_id=record.session_id,
        created_at=_timestamp(record.created_at),
        updated_at=_timestamp(record.updated_at),
        result=record.result,
        error=record.error,
        usage=common_pb2.Usage(
            input_tokens=record.usage.input_tokens,
            output_tokens=record.usage.output_tokens,
            total_tokens=record.usage.total_tokens,
            cost_usd=record.usage.cost_usd,
        ),
        duration_ms=record.duration_ms,
    )


_STATUS_VALUES = {
    status: common_pb2.WorkflowStatus.Value(f"WORKFLOW_STATUS_{status.value}")
    for status in WorkflowStatus
}


def _type_name(value: int) -> str:
    """The bare name of an EventType value; "" for UNSPECIFIED, a marker for unknown numbers
    (proto3 enums are open), so validation can name what was wrong."""
    if value == common_pb2.EVENT_TYPE_UNSPECIFIED:
        return ""
    try:
        return type_name(value)
    except ValueError:
        return f"EventType({value})"


def _type_names(values: Iterable[int]) -> list[str]:
    return [_type_name(value) for value in values]


def _timestamp(moment: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


async def _call(context: Context, operation: Awaitable[_T]) -> _T:
    try:
        return await operation
    except (EventsError, SQLAlchemyError) as exc:
        await _abort(context, exc)


async def _abort(context: Context, exc: Exception) -> NoReturn:
    """End the RPC with the status the error stands for; never leak a stack trace."""
    if isinstance(exc, EventsError):
        await context.abort(_CODES.get(type(exc), grpc.StatusCode.INTERNAL), str(exc))
    log.exception("storage error", exc_info=exc)
    if isinstance(exc, OperationalError):
        # Locked or unreachable database: worth a retry by the caller.
        await context.abort(grpc.StatusCode.UNAVAILABLE, "event storage is unavailable; retry")
    await context.abort(grpc.StatusCode.INTERNAL, "event storage failed; see the events log")
    raise AssertionError("context.abort returned")
