"""EventService.AppendStream: one producer process's batches, and the workflows it creates,
over one call. Each AppendCall is answered on its own (see concurrent_calls.py); a refused
one gets its error and the call goes on."""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import AbstractContextManager
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagate import extract
from opentelemetry.trace import Span, SpanKind

from shuttle.grpc_client import status_code
from shuttle.metrics import APPEND_STREAMS, GRPC_SECONDS
from shuttle.v1 import events_pb2

from .concurrent_calls import answered_concurrently
from .grpc_status import status_of
from .grpc_tenancy import agreed_tenant
from .log import EventLog
from .messages import new_events, workflow_message
from .records import NewEvent, WorkflowRecord
from .roles import check_append
from .wire import SERVICE_NAME

_TRACER = trace.get_tracer(__name__)
_APPEND_STREAM_METHOD = f"/{SERVICE_NAME}/AppendStream"


@dataclass(frozen=True)
class AppendStreamCaller:
    """Who holds one AppendStream call: `tenant` from its metadata (may be empty), `role`
    its component; `records_spans` whether this process records spans."""

    event_log: EventLog
    tenant: str
    role: str
    records_spans: bool


async def append_stream_answers(
    calls: AsyncIterable[events_pb2.AppendCall], caller: AppendStreamCaller
) -> AsyncIterator[events_pb2.AppendAnswer]:
    """The answer to each call, as each is ready. Functions rather than methods, so that
    tests/shared/test_request_fields.py can follow the requests through them."""

    async def timed(call: events_pb2.AppendCall) -> events_pb2.AppendAnswer:
        started = time.perf_counter()
        creates = call.HasField("create")
        answer = await (_create(call, caller) if creates else _append(call, caller))
        code = status_code(answer.error.code).name  # no error: 0, OK
        # One observation per message, as a unary Append or CreateWorkflow would give.
        GRPC_SECONDS.labels(_APPEND_STREAM_METHOD, code).observe(time.perf_counter() - started)
        return answer

    APPEND_STREAMS.inc()
    try:
        async for answer in answered_concurrently(calls, timed):
            yield answer
    finally:
        APPEND_STREAMS.dec()


async def _append(
    call: events_pb2.AppendCall, caller: AppendStreamCaller
) -> events_pb2.AppendAnswer:
    request = call.request
    try:
        tenant = agreed_tenant(caller.tenant, request.tenant_id)
        with _traced(call.traceparent, caller, "AppendStream", request.workflow_id):
            batch = new_events(request.events)
            check_append("AppendStream", caller.role, batch)
            seqs = await append_as_requested(caller.event_log, tenant, request, batch)
    except Exception as exc:
        return _refused(call.id, exc, "append")
    return events_pb2.AppendAnswer(id=call.id, seqs=seqs)


async def _create(
    call: events_pb2.AppendCall, caller: AppendStreamCaller
) -> events_pb2.AppendAnswer:
    create = call.create
    try:
        tenant = agreed_tenant(caller.tenant, create.tenant_id)
        with _traced(call.traceparent, caller, "CreateWorkflow", create.workflow_id):
            record = await create_as_requested(caller.event_log, tenant, create)
    except Exception as exc:
        return _refused(call.id, exc, "create")
    return events_pb2.AppendAnswer(id=call.id, workflow=workflow_message(record))


async def append_as_requested(
    event_log: EventLog, tenant: str, request: events_pb2.AppendRequest, batch: list[NewEvent]
) -> list[int]:
    """`batch` (the request's events, checked) appended as the request asks."""
    return await event_log.append(
        request.workflow_id,
        tenant,
        batch,
        producer_id=request.producer_id,
        batch_seq=request.batch_seq,
        lease_epoch=request.lease_epoch,
    )


async def create_as_requested(
    event_log: EventLog, tenant: str, request: events_pb2.CreateWorkflowRequest
) -> WorkflowRecord:
    return await event_log.create_workflow(
        tenant_id=tenant,
        owner=request.owner,
        query=request.query,
        session_id=request.session_id,
        workflow_id=request.workflow_id,
        spec_json=request.spec_json,
        lease_owner=request.lease_owner,
        lease_ttl_ms=request.lease_ttl_ms,
    )


def _traced(
    traceparent: str, caller: AppendStreamCaller, method: str, workflow_id: str
) -> AbstractContextManager[Span]:
    """A call's work in its producer's trace (the stream itself, which outlives many runs,
    is not traced), so that a batch's events name that trace (see new_events): a span of its
    own, or, where spans are not recorded, the producer's span as the traceparent names it.
    Under a hundred runs, starting a span and parsing the header per batch took 7 % of this
    service's CPU (py-spy) for spans nobody records."""
    if not caller.records_spans and traceparent:
        producer = _producer_span(traceparent)
        if producer.get_span_context().is_valid:
            return trace.use_span(producer)
    attributes = {"rpc.system": "grpc", "rpc.service": SERVICE_NAME, "rpc.method": method}
    if workflow_id:
        attributes["shuttle.workflow_id"] = workflow_id
    return _TRACER.start_as_current_span(
        f"/{SERVICE_NAME}/{method}",
        context=extract({"traceparent": traceparent}) if traceparent else Context(),
        kind=SpanKind.SERVER,
        attributes=attributes,
    )


def _refused(call_id: int, exc: Exception, what: str) -> events_pb2.AppendAnswer:
    code, details = status_of(exc, what)
    error = events_pb2.AppendError(code=code.value[0], message=details)
    return events_pb2.AppendAnswer(id=call_id, error=error)


@functools.lru_cache(maxsize=1024)
def _producer_span(traceparent: str) -> Span:
    """A run's batches mostly carry the same traceparent; the propagator's parse looks its
    regex up by the compiled pattern's hash on every call."""
    return trace.get_current_span(extract({"traceparent": traceparent}))
