"""Protobuf <-> domain conversions of the EventService's requests and answers."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from shuttle.envelope import type_name
from shuttle.telemetry import current_trace_id
from shuttle.usage import usage_to_proto
from shuttle.v1 import common_pb2, events_pb2

from .errors import InvalidArgument
from .records import NewEvent, WorkflowRecord, WorkflowStatus
from .wire import timestamp


def new_events(drafts: Iterable[common_pb2.EventDraft]) -> list[NewEvent]:
    """A producer's drafts as domain events; the log validates them."""
    # The append's own span continues the producer's trace, so an event the producer did
    # not stamp still names the trace it belongs to. One span per batch: read it once.
    batch_trace_id = current_trace_id()
    return [
        NewEvent(
            type=event_type_name(draft.type),
            agent_id=draft.agent_id,
            message=draft.message,
            payload_json=draft.payload_json,
            timestamp=_timestamp(draft) if draft.HasField("timestamp") else None,
            trace_id=draft.trace_id or batch_trace_id,
        )
        for draft in drafts
    ]


def _timestamp(draft: common_pb2.EventDraft) -> datetime:
    try:
        return draft.timestamp.ToDatetime(tzinfo=UTC)
    except ValueError as exc:  # seconds outside years 1 to 9999
        raise InvalidArgument(f"an event's timestamp is out of range: {exc}") from None


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
        usage=usage_to_proto(record.usage),
        duration_ms=record.duration_ms,
        lease_owner=record.lease_owner,
        lease_expires_at=timestamp(record.lease_expires_at) if record.lease_expires_at else None,
        lease_epoch=record.lease_epoch,
        takeovers=record.takeovers,
        spec_json=record.spec_json,
    )


_STATUS_VALUES = {
    status: common_pb2.WorkflowStatus.Value(f"WORKFLOW_STATUS_{status.value}")
    for status in WorkflowStatus
}


def event_type_name(value: int) -> str:
    """The bare name of an EventType value; "" for UNSPECIFIED, a marker for unknown numbers
    (proto3 enums are open), so validation can name what was wrong."""
    if value == common_pb2.EVENT_TYPE_UNSPECIFIED:
        return ""
    try:
        return type_name(value)
    except ValueError:
        return f"EventType({value})"


def event_type_names(values: Iterable[int]) -> list[str]:
    return [event_type_name(value) for value in values]
