"""gRPC adapter: shuttle.v1.EventService on top of EventLog (protobuf <-> domain only)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterator

import grpc
from sqlalchemy.exc import SQLAlchemyError

from shuttle.grpc_auth import caller_role
from shuttle.metrics import COMMAND_FEEDS
from shuttle.v1 import events_pb2

from .claims import claim_runs
from .command_watches import CommandWatches, WatchItem
from .errors import EventsError, InvalidArgument
from .grpc_append_stream import (
    AppendStreamCaller,
    append_as_requested,
    append_stream_answers,
    create_as_requested,
)
from .grpc_status import abort_with, answered, status_of
from .grpc_tenancy import agreed_tenant, caller_tenant
from .leases import LeaseStore
from .log import EventLog
from .messages import event_type_names, new_events, workflow_message
from .roles import check_append
from .wire import EventEncoder, event_message

log = logging.getLogger(__name__)


class EventServiceServicer:
    """Each RPC converts its request, calls EventLog, and converts the answer back.

    Stream and StreamBatches yield serialized messages (see `add_to_server`), each event
    encoded once by `encoder` whatever the number of subscribers."""

    def __init__(
        self, event_log: EventLog, leases: LeaseStore, *, records_spans: bool = True
    ) -> None:
        self._log = event_log
        self._leases = leases
        self.encoder = EventEncoder()
        self._records_spans = records_spans
        """False when this process exports no spans: AppendStream batches then only join
        their producer's trace instead of each starting a span."""

    async def CreateWorkflow(
        self,
        request: events_pb2.CreateWorkflowRequest,
        context: grpc.aio.ServicerContext[events_pb2.CreateWorkflowRequest, events_pb2.Workflow],
    ) -> events_pb2.Workflow:
        tenant = await caller_tenant(context, request.tenant_id)
        record = await answered(context, create_as_requested(self._log, tenant, request))
        return workflow_message(record)

    async def GetWorkflow(
        self,
        request: events_pb2.GetWorkflowRequest,
        context: grpc.aio.ServicerContext[events_pb2.GetWorkflowRequest, events_pb2.Workflow],
    ) -> events_pb2.Workflow:
        tenant = await caller_tenant(context, request.tenant_id)
        record = await answered(
            context, self._log.get_workflow(request.workflow_id, tenant, with_spec=True)
        )
        return workflow_message(record)

    async def Append(
        self,
        request: events_pb2.AppendRequest,
        context: grpc.aio.ServicerContext[events_pb2.AppendRequest, events_pb2.AppendResponse],
    ) -> events_pb2.AppendResponse:
        tenant = await caller_tenant(context, request.tenant_id)
        try:
            batch = new_events(request.events)
            check_append("Append", caller_role.get(), batch)
        except EventsError as exc:
            await abort_with(context, exc)
        seqs = await answered(context, append_as_requested(self._log, tenant, request, batch))
        return events_pb2.AppendResponse(seqs=seqs)

    async def AppendStream(
        self,
        request_iterator: AsyncIterable[events_pb2.AppendCall],
        context: grpc.aio.ServicerContext[events_pb2.AppendCall, events_pb2.AppendAnswer],
    ) -> AsyncIterator[events_pb2.AppendAnswer]:
        tenant = await caller_tenant(context, "")
        caller = AppendStreamCaller(self._log, tenant, caller_role.get(), self._records_spans)
        async for answer in append_stream_answers(request_iterator, caller):
            yield answer

    async def Stream(
        self,
        request: events_pb2.StreamRequest,
        context: grpc.aio.ServicerContext[events_pb2.StreamRequest, bytes],
    ) -> AsyncIterator[bytes]:
        tenant = await caller_tenant(context, request.tenant_id)
        events = self._log.stream(
            request.workflow_id,
            tenant,
            from_seq=request.from_seq,
            types=event_type_names(request.types),
        )
        try:
            async for event in events:
                yield self.encoder.event_bytes(event)
        except (EventsError, SQLAlchemyError, OSError) as exc:
            await abort_with(context, exc)

    async def StreamBatches(
        self,
        request: events_pb2.StreamRequest,
        context: grpc.aio.ServicerContext[events_pb2.StreamRequest, bytes],
    ) -> AsyncIterator[bytes]:
        tenant = await caller_tenant(context, request.tenant_id)
        batches = self._log.stream_batches(
            request.workflow_id,
            tenant,
            from_seq=request.from_seq,
            types=event_type_names(request.types),
        )
        try:
            async for batch in batches:
                for message in self.encoder.batch_bytes(batch):
                    yield message
        except (EventsError, SQLAlchemyError, OSError) as exc:
            await abort_with(context, exc)

    async def List(
        self,
        request: events_pb2.ListRequest,
        context: grpc.aio.ServicerContext[events_pb2.ListRequest, events_pb2.ListResponse],
    ) -> events_pb2.ListResponse:
        tenant = await caller_tenant(context, request.tenant_id)
        page = await answered(
            context,
            self._log.list_events(
                request.workflow_id,
                tenant,
                from_seq=request.from_seq,
                limit=request.limit,
                types=event_type_names(request.types),
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
        tenant = await caller_tenant(context, request.tenant_id)
        deleted, removed = await answered(
            context, self._log.delete_workflows(tenant, list(request.workflow_ids))
        )
        return events_pb2.DeleteWorkflowsResponse(deleted=deleted, events_deleted=removed)

    async def RenewLease(
        self,
        request: events_pb2.RenewLeaseRequest,
        context: grpc.aio.ServicerContext[events_pb2.RenewLeaseRequest, events_pb2.Workflow],
    ) -> events_pb2.Workflow:
        tenant = await caller_tenant(context, request.tenant_id)
        record = await answered(
            context,
            self._leases.renew(
                request.workflow_id, tenant, request.owner, request.ttl_ms, request.epoch
            ),
        )
        return workflow_message(record)

    async def ClaimRuns(
        self,
        request: events_pb2.ClaimRunsRequest,
        context: grpc.aio.ServicerContext[
            events_pb2.ClaimRunsRequest, events_pb2.ClaimRunsResponse
        ],
    ) -> events_pb2.ClaimRunsResponse:
        # Across tenants: the executor role runs every tenant's runs (see roles.py).
        records = await answered(
            context, claim_runs(self._leases, request.owner, request.ttl_ms, request.limit)
        )
        return events_pb2.ClaimRunsResponse(workflows=[workflow_message(r) for r in records])

    async def ReleaseLease(
        self,
        request: events_pb2.ReleaseLeaseRequest,
        context: grpc.aio.ServicerContext[events_pb2.ReleaseLeaseRequest, events_pb2.Workflow],
    ) -> events_pb2.Workflow:
        tenant = await caller_tenant(context, request.tenant_id)
        record = await answered(
            context,
            self._leases.release(request.workflow_id, tenant, request.owner, request.epoch),
        )
        return workflow_message(record)

    async def FollowCommands(
        self,
        request_iterator: AsyncIterable[events_pb2.CommandWatch],
        context: grpc.aio.ServicerContext[events_pb2.CommandWatch, events_pb2.CommandFeed],
    ) -> AsyncIterator[events_pb2.CommandFeed]:
        caller = await caller_tenant(context, "")
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
                try:
                    tenant = agreed_tenant(caller, watch.tenant_id)
                except InvalidArgument as mismatch:
                    watches.refuse(watch.workflow_id, mismatch)
                else:
                    watches.watch(watch.workflow_id, tenant, watch.from_seq)
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
        code, details = status_of(item.error, "command watch")
        last.error.code = code.value[0]
        last.error.message = details
    yield last
