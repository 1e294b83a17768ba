"""Rows of the workflow log's tables as domain records, and back."""

from __future__ import annotations

from typing import Any

from sqlalchemy import RowMapping

from shuttle.usage import TokenUsage

from .records import StoredEvent, WorkflowRecord, WorkflowStatus


def workflow_record(row: RowMapping) -> WorkflowRecord:
    return WorkflowRecord(
        workflow_id=row["id"],
        tenant_id=row["tenant_id"],
        owner=row["owner"],
        status=WorkflowStatus(row["status"]),
        query=row["query"],
        session_id=row["session_id"],
        last_seq=row["last_seq"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        result=row["result"],
        error=row["error"],
        usage=TokenUsage(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            total_tokens=row["total_tokens"],
            cost_usd=row["cost_usd"],
        ),
        duration_ms=row["duration_ms"],
        stream_ended=bool(row["stream_ended"]),
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        lease_epoch=row["lease_epoch"],
        takeovers=row["takeovers"],
        spec_json=row.get("spec", ""),  # read only where it is answered
    )


def event_row(event: StoredEvent) -> dict[str, Any]:
    return {
        "workflow_id": event.workflow_id,
        "seq": event.seq,
        "type": event.type,
        "agent_id": event.agent_id,
        "message": event.message,
        "payload": event.payload_json,
        "timestamp": event.timestamp,
        "trace_id": event.trace_id,
    }


def stored_event(row: RowMapping) -> StoredEvent:
    return StoredEvent(
        workflow_id=row["workflow_id"],
        seq=row["seq"],
        type=row["type"],
        agent_id=row["agent_id"],
        message=row["message"],
        payload_json=row["payload"],
        timestamp=row["timestamp"],
        trace_id=row["trace_id"],
    )
