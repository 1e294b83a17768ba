"""Durable tier of the workflow log: the workflow registry and durable events in SQL."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import RowMapping, case, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .errors import AlreadyExists, EventsError, FailedPrecondition, NotFound
from .lifecycle import derive_update
from .models import events, workflows
from .records import (
    TERMINAL_STATUSES,
    NewEvent,
    StoredEvent,
    Usage,
    WorkflowRecord,
    WorkflowStatus,
)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class SqlEventStore:
    """Workflows and their durable events, on any SQLAlchemy async engine.

    Seqs come from the workflow row's ``last_seq`` counter, bumped by the same transaction
    that inserts the events: a rolled-back batch consumes nothing, and concurrent writers
    (tasks or replicas) serialize on the row, so seqs are gap-free and never repeat.
    Ephemeral events take seqs from the counter too but are returned, not inserted.
    """

    def __init__(self, engine: AsyncEngine, *, clock: Clock = utc_now) -> None:
        self._engine = engine
        self._clock = clock

    async def create_workflow(
        self,
        *,
        workflow_id: str,
        tenant_id: str,
        owner: str = "",
        query: str = "",
        session_id: str = "",
    ) -> WorkflowRecord:
        """Register a workflow with an empty log; AlreadyExists if the id is taken."""
        now = self._clock()
        record = WorkflowRecord(
            workflow_id=workflow_id,
            tenant_id=tenant_id,
            owner=owner,
            status=WorkflowStatus.PENDING,
            query=query,
            session_id=session_id,
            last_seq=0,
            created_at=now,
            updated_at=now,
        )
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    insert(workflows).values(
                        id=workflow_id,
                        tenant_id=tenant_id,
                        owner=owner,
                        status=record.status.value,
                        query=query,
                        session_id=session_id,
                        last_seq=0,
                        created_at=now,
                        updated_at=now,
                    )
                )
        except IntegrityError:
            # Whichever tenant holds the id, saying so leaks nothing but "taken".
            raise AlreadyExists(f"workflow {workflow_id!r} already exists") from None
        return record

    async def get_workflow(self, workflow_id: str, tenant_id: str) -> WorkflowRecord:
        """The workflow's row; NotFound when missing or owned by another tenant."""
        async with self._engine.connect() as conn:
            row = await _workflow_row(conn, workflow_id, tenant_id)
        return _record(row)

    async def append(
        self, workflow_id: str, tenant_id: str, batch: Sequence[NewEvent]
    ) -> list[StoredEvent]:
        """Give the batch consecutive seqs and store its durable events, in one transaction.

        The batch is assumed valid (see ``validation``); the workflow's status and outcome
        follow its lifecycle events. Returns every event, ephemeral ones included.
        """
        now = self._clock()
        row_update = derive_update(batch)
        values: dict[str, Any] = {
            "last_seq": workflows.c.last_seq + len(batch),
            "updated_at": now,
            **row_update.columns(),
        }
        if row_update.status is not None:
            # A finished workflow stays finished whatever a late producer reports.
            values["status"] = case(
                (workflows.c.status.in_([s.value for s in TERMINAL_STATUSES]), workflows.c.status),
                else_=row_update.status.value,
            )
        bump = (
            update(workflows)
            .where(
                workflows.c.id == workflow_id,
                workflows.c.tenant_id == tenant_id,
                workflows.c.stream_ended.is_(False),
            )
            .values(values)
            .returning(workflows.c.last_seq)
        )
        async with self._engine.begin() as conn:
            last_seq = (await conn.execute(bump)).scalar_one_or_none()
            if last_seq is None:
                raise await _refusal(conn, workflow_id, tenant_id)
            first_seq = last_seq - len(batch) + 1
            stored = [
                StoredEvent(
                    workflow_id=workflow_id,
                    seq=first_seq + index,
                    type=event.type,
                    agent_id=event.agent_id,
                    message=event.message,
                    payload_json=event.payload_json or "{}",
                    timestamp=event.timestamp or now,
                    trace_id=event.trace_id,
                )
                for index, event in enumerate(batch)
            ]
            durable = [_event_values(event) for event in stored if not event.ephemeral]
            if durable:
                await conn.execute(insert(events), durable)
        return stored

    async def list_events(
        self,
        workflow_id: str,
        tenant_id: str,
        *,
        from_seq: int = 1,
        to_seq: int | None = None,
        limit: int = 100,
        types: Collection[str] | None = None,
    ) -> list[StoredEvent]:
        """Durable events with ``from_seq <= seq <= to_seq`` (of `types`, when given), oldest
        first, at most `limit`; NotFound when the workflow is not this tenant's."""
        query = (
            select(events)
            .where(events.c.workflow_id == workflow_id, events.c.seq >= from_seq)
            .order_by(events.c.seq)
            .limit(limit)
        )
        if to_seq is not None:
            query = query.where(events.c.seq <= to_seq)
        if types:
            query = query.where(events.c.type.in_(sorted(types)))
        async with self._engine.connect() as conn:
            await _workflow_row(conn, workflow_id, tenant_id)  # tenancy: NotFound if not theirs
            rows = (await conn.execute(query)).mappings().all()
        return [_stored(row) for row in rows]


async def _workflow_row(conn: AsyncConnection, workflow_id: str, tenant_id: str) -> RowMapping:
    row = (
        (
            await conn.execute(
                select(workflows).where(
                    workflows.c.id == workflow_id, workflows.c.tenant_id == tenant_id
                )
            )
        )
        .mappings()
        .one_or_none()
    )
    if row is None:
        raise NotFound(f"workflow {workflow_id!r} not found")
    return row


async def _refusal(conn: AsyncConnection, workflow_id: str, tenant_id: str) -> EventsError:
    """Why the counter bump matched no row: no such workflow (raised), or its log has ended."""
    row = await _workflow_row(conn, workflow_id, tenant_id)
    return FailedPrecondition(
        f"workflow {workflow_id!r} has ended (its log holds STREAM_END at seq "
        f"{row['last_seq']}); nothing more can be appended"
    )


def _record(row: RowMapping) -> WorkflowRecord:
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
        usage=Usage(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            total_tokens=row["total_tokens"],
            cost_usd=row["cost_usd"],
        ),
        duration_ms=row["duration_ms"],
        stream_ended=bool(row["stream_ended"]),
    )


def _event_values(event: StoredEvent) -> dict[str, Any]:
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


def _stored(row: RowMapping) -> StoredEvent:
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
