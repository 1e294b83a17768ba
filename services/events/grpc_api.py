"""gRPC adapter: shuttle.v1.EventService on top of EventLog (protobuf <-> domain only)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Iterable, Iterator
from datetime import UTC
from typing import Any, NoReturn, TypeVar

import grpc
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError

from shuttle.envelope import type_name
from shuttle.grpc_client import TENANT_METADATA_KEY
from shuttle.metrics import COMMAND_FEEDS
from shuttle.telemetry import current_trace_id
from shuttle.v1 import common_pb2, events_pb2

from .command_watches import CommandWatches, WatchItem
from .errors import AlreadyExists, EventsError, FailedPrecondition, InvalidArgument, NotFound
from .leases import LeaseStore
from .log import EventLog
from .records import NewEvent, WorkflowRecord, WorkflowStatus
from .wire import EventEncoder, event_message, timestamp

log = logging.getLogger(__name__)


_T = TypeVar("_T")
Context = grpc.aio.ServicerContext[Any, Any]

_CODES: dict[type[EventsError], grpc.StatusCode] = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
}


class EventServiceServicer:
    """Each RPC converts its request, calls EventLog, and converts the answer back.

    Stream and StreamBatches yield serialized messages (see `add_to_server`), each event
    encoded once by `encoder` whatever the number of subscribers."""

    def __init__(self, event_log: EventLog, leases: LeaseStore) -> None:
        self._log = event_log
        self._leases = leases
        self.encoder = EventEncoder()

    async def CreateWorkflow(
        self,
        request: events_pb2.CreateWorkflowRequest,
        context: grpc.aio.ServicerContext[events_pb2.CreateWorkflowRequest, events_pb2.Workflow],
    ) -> events_pb2.Workflow:
        record = await _call(
            context,
            self._log.create_workflow(
                tenant_id=await _tenant(context, request.tenant_id),
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
        tenant = await _tenant(context, request.tenant_id)
        record = await _call(context, self._log.get_workflow(request.workflow_id, tenant))
        return workflow_message(record)

    async def Append(
        self,
        request: events_pb2.AppendRequest,
        context: grpc.aio.ServicerContext[events_pb2.AppendRequest, events_pb2.AppendResponse],
    ) -> events_pb2.AppendResponse:
        tenant = await _tenant(context, request.tenant_id)
        batch = [new_event(draft) for draft in request.events]
        seqs = await _call(
            context,
            self._log.append(
                request.workflow_id,
                tenant,
                batch,
                producer_id=request.producer_id,
                batch_seq=request.batch_seq,
            ),
        )
        return events_pb2.AppendResponse(seqs=seqs)

    async def Stream(
        self,
        request: events_pb2.StreamRequest,
        context: grpc.aio.ServicerContext[events_pb2.StreamRequest, bytes],
    ) -> AsyncIterator[bytes]:
        tenant = await _tenant(context, request.tenant_id)
        events = self._log.stream(
            request.workflow_id,
            tenant,
            from_seq=request.from_seq,
            types=_type_names(request.types),
        )
        try:
            async for event in events:
                yield self.encoder.event_bytes(event)
        except (EventsError, SQLAlchemyError, OSError) as exc:
            await _abort(context, exc)

    async def StreamBatches(
        self,
        request: events_pb2.StreamRequest,
        context: grpc.aio.ServicerContext[events_pb2.StreamRequest, bytes],
    ) -> AsyncIterator[bytes]:
        tenant = await _tenant(context, request.tenant_id)
        batches = self._log.stream_batches(
            request.workflow_id,
            tenant,
            from_seq=request.from_seq,
            types=_type_names(request.types),
        )
        try:
            async for batch in batches:
                for message in self.encoder.batch_bytes(batch):
                    yield message
        except (EventsError, SQLAlchemyError, OSError) as exc:
            await _abort(context, exc)

    async def List(
        self,
        request: events_pb2.ListRequest,
        context: grpc.aio.ServicerContext[events_pb2.ListRequest, events_pb2.ListResponse],
    ) -> events_pb2.ListResponse:
        tenant = await _tenant(context, request.tenant_id)
        page = await _call(
            context,
            self._log.list_events(
                request.workflow_id,
                tenant,
                from_seq=request.from_seq,
                limit=request.limit,
                types=_type_names(request.types),
                full_results=request.full_results,
            ),
        )
        return events_pb2.ListResponse(
            events=[event_message(event) for event in page.events], next_seq=page.next_seq
        )

    async def DeleteWorkflows(
        self,
        request: events_pb2.DeleteWorkflowsRequest,
        context: grpc.aio.ServicerContext[
            events_pb2.DeleteWorkflowsRequest, events_pb2.DeleteWorkflowsResponse
        ],
    ) -> events_pb2.DeleteWorkflowsResponse:
        tenant = await _tenant(context, request.tenant_id)
        deleted, removed = await _call(
            context, self._log.delete_workflows(tenant, list(request.workflow_ids))
        )
        return events_pb2.DeleteWorkflowsResponse(deleted=deleted, events_deleted=removed)

    async def RenewLease(
        self,
        request: events_pb2.RenewLeaseRequest,
        context: grpc.aio.ServicerContext[events_pb2.RenewLeaseRequest, events_pb2.Workflow],
    ) -> events_pb2.Workflow:
        tenant = await _tenant(context, request.tenant_id)
        record = await _call(
            context,
            self._leases.renew(request.workflow_id, tenant, request.owner, request.ttl_ms),
        )
        return workflow_message(record)

    async def FollowCommands(
        self,
        request_iterator: AsyncIterable[events_pb2.CommandWatch],
        context: grpc.aio.ServicerContext[events_pb2.CommandWatch, events_pb2.CommandFeed],
    ) -> AsyncIterator[events_pb2.CommandFeed]:
        caller = await _tenant(context, "")
        watches = CommandWatches(self._log)
        reader = asyncio.create_task(_read_watches(request_iterator, watches, caller))
        COMMAND_FEEDS.inc()
        try:
            async for item in watches.items():
                for message in _feed_messages(item, self.encoder):
                    yield message
        finally:
            COMMAND_FEEDS.dec()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await watches.close()


async def _read_watches(
    requests: AsyncIterable[events_pb2.CommandWatch], watches: CommandWatches, caller: str
) -> None:
    try:
        async for request in requests:
            action = request.WhichOneof("action")
            if action == "watch":
                watch = request.watch
                if caller and watch.tenant_id and watch.tenant_id != caller:
                    mismatch = InvalidArgument(
                        f"tenant_id {watch.tenant_id!r} differs from the {TENANT_METADATA_KEY} "
                        f"metadata {caller!r}: send one tenant"
                    )
                    watches.refuse(watch.workflow_id, mismatch)
                else:
                    watches.watch(watch.workflow_id, caller or watch.tenant_id, watch.from_seq)
            elif action == "unwatch":
                watches.unwatch(request.unwatch.workflow_id)
    finally:
        watches.finish()


def _feed_messages(item: WatchItem, encoder: EventEncoder) -> Iterator[events_pb2.CommandFeed]:
    """The item in messages under the size limit, its end or error on the last one."""
    parts = list(encoder.parts(list(item.events))) or [[]]
    for part in parts[:-1]:
        yield events_pb2.CommandFeed(
            workflow_id=item.workflow_id, events=[event_message(e) for e in part]
        )
    last = events_pb2.CommandFeed(
        workflow_id=item.workflow_id,
        events=[event_message(e) for e in parts[-1]],
        ended=item.ended,
    )
    if item.error is not None:
        code, details = _status(item.error)
        last.error.code = code.value[0]
        last.error.message = details
    yield last


def _status(exc: Exception) -> tuple[grpc.StatusCode, str]:
    """The status an error stands for, as `_abort` would end a call with it."""
    if isinstance(exc, EventsError):
        return _CODES.get(type(exc), grpc.StatusCode.INTERNAL), str(exc)
    log.error("command watch failed", exc_info=exc)
    if storage_unavailable(exc):
        return grpc.StatusCode.UNAVAILABLE, "event storage is unavailable; retry"
    return grpc.StatusCode.INTERNAL, "event storage failed; see the events log"


async def _tenant(context: Context, field_value: str) -> str:
    """The caller's tenant: the x-shuttle-tenant metadata, else the request's tenant_id;
    both set and different is refused rather than guessed."""
    from_metadata = ""
    for key, value in context.invocation_metadata() or ():
        if key == TENANT_METADATA_KEY:
            from_metadata = value if isinstance(value, str) else value.decode()
    if from_metadata and field_value and from_metadata != field_value:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"tenant_id {field_value!r} differs from the {TENANT_METADATA_KEY} metadata "
            f"{from_metadata!r}: send one tenant",
        )
    return from_metadata or field_value


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


def workflow_message(record: WorkflowRecord) -> events_pb2.Workflow:
    return events_pb2.Workflow(
        workflow_id=record.workflow_id,
        tenant_id=record.tenant_id,
        owner=record.owner,
        status=_STATUS_VALUES[record.status],
        last_seq=record.last_seq,
        query=record.query,
        session_id=record.session_id,
        created_at=timestamp(record.created_at),
        updated_at=timestamp(record.updated_at),
        result=record.result,
        error=record.error,
        usage=common_pb2.Usage(
            input_tokens=record.usage.input_tokens,
            output_tokens=record.usage.output_tokens,
            total_tokens=record.usage.total_tokens,
            cost_usd=record.usage.cost_usd,
        ),
        duration_ms=record.duration_ms,
        lease_owner=record.lease_owner,
        lease_expires_at=timestamp(record.lease_expires_at) if record.lease_expires_at else None,
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


async def _call(context: Context, operation: Awaitable[_T]) -> _T:
    try:
        return await operation
    except (EventsError, SQLAlchemyError, OSError) as exc:
        await _abort(context, exc)


# SQLSTATE classes of a database that is down or on its way up: connection exception (08)
# and operator intervention (57: shutting down, crashed, "the database system is starting up").
_TRANSIENT_SQLSTATE_CLASSES = ("08", "57")


def storage_unavailable(exc: BaseException) -> bool:
    """Whether a storage failure is the database being out of reach for now (a retry by the
    caller, whose appends are idempotent, will do) rather than a fault in the request."""
    if isinstance(exc, OSError | OperationalError | InterfaceError):
        return True  # refused connection, locked SQLite, pooled connection closed by a restart
    if isinstance(exc, DBAPIError):
        sqlstate = str(getattr(exc.orig, "sqlstate", None) or "")
        return exc.connection_invalidated or sqlstate[:2] in _TRANSIENT_SQLSTATE_CLASSES
    return False


async def _abort(context: Context, exc: Exception) -> NoReturn:
    """End the RPC with the status the error stands for; never leak a stack trace."""
    if isinstance(exc, EventsError):
        await context.abort(_CODES.get(type(exc), grpc.StatusCode.INTERNAL), str(exc))
    log.exception("storage error", exc_info=exc)
    if storage_unavailable(exc):
        await context.abort(grpc.StatusCode.UNAVAILABLE, "event storage is unavailable; retry")
    await context.abort(grpc.StatusCode.INTERNAL, "event storage failed; see the events log")
    raise AssertionError("context.abort returned")
