"""Durable tier of the workflow log: the workflow registry and durable events in SQL."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import RowMapping, case, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shuttle.envelope import EPHEMERAL_TYPES

from .errors import AlreadyExists, EventsError, FailedPrecondition, InvalidArgument, NotFound
from .lifecycle import derive_update
from .models import appends, events, tool_results, workflows
from .records import (
    TERMINAL_STATUSES,
    Appended,
    NewEvent,
    StoredEvent,
    WorkflowRecord,
    WorkflowStatus,
)
from .rows import event_row, stored_event, workflow_record

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class SqlEventStore:
    """Workflows and their durable events, on any SQLAlchemy async engine.

    Seqs come from the workflow row's ``last_seq`` counter, bumped by the same transaction
    that inserts the events: a rolled-back batch consumes nothing, and concurrent writers
    (tasks or replicas) serialize on the row, so seqs are gap-free and never repeat.
    Ephemeral events take seqs from the counter too but are returned, not inserted.
    A batch named by (producer_id, batch_seq) is recorded in ``appends`` in the same
    transaction, so a retry, on any replica, finds its seqs instead of storing it twice.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        clock: Clock = utc_now,
        ephemeral_types: Collection[str] = EPHEMERAL_TYPES,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._ephemeral = frozenset(ephemeral_types)
        # SQLite has one writer at a time. Queueing this process's appends here costs
        # nothing, while letting them collide makes SQLite's busy handler sleep in steps of
        # up to 100 ms (measured: a third of the throughput with 8 concurrent workflows).
        self._write_lock = (
            asyncio.Lock() if engine.dialect.name == "sqlite" else contextlib.nullcontext()
        )

    @property
    def write_lock(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """What this store's writers queue on (a lock on SQLite, nothing elsewhere), for other
        writers of the same tables in this process."""
        return self._write_lock

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

    async def delete_workflows(
        self, tenant_id: str, workflow_ids: Collection[str]
    ) -> tuple[list[str], int]:
        """Delete the tenant's workflows among `workflow_ids` whole, in one transaction;
        (the ids deleted, how many events went with them). Others' ids are left alone."""
        async with self._write_lock, self._engine.begin() as conn:
            found = (
                await conn.execute(
                    select(workflows.c.id).where(
                        workflows.c.tenant_id == tenant_id, workflows.c.id.in_(workflow_ids)
                    )
                )
            ).scalars()
            ids = sorted(str(i) for i in found)
            if not ids:
                return [], 0
            # Children first, explicitly: SQLite only cascades with foreign keys switched on.
            for table in (tool_results, appends):
                await conn.execute(delete(table).where(table.c.workflow_id.in_(ids)))
            removed = await conn.execute(delete(events).where(events.c.workflow_id.in_(ids)))
            await conn.execute(delete(workflows).where(workflows.c.id.in_(ids)))
        return ids, removed.rowcount or 0

    async def get_workflow(self, workflow_id: str, tenant_id: str) -> WorkflowRecord:
        """The workflow's row; NotFound when missing or owned by another tenant."""
        async with self._engine.connect() as conn:
            row = await workflow_row(conn, workflow_id, tenant_id)
        return workflow_record(row)

    async def append(
        self,
        workflow_id: str,
        tenant_id: str,
        batch: Sequence[NewEvent],
        *,
        producer_id: str = "",
        batch_seq: int = 0,
    ) -> Appended:
        """Give the batch consecutive seqs and store its durable events, in one transaction.

        The batch is assumed valid (see ``validation``); the workflow's status and outcome
        follow its lifecycle events. A repeated (producer_id, batch_seq) returns the first
        call's seqs with no events (nothing new to publish).
        """
        try:
            async with self._write_lock, self._engine.begin() as conn:
                return await self._append_in(
                    conn, workflow_id, tenant_id, batch, producer_id, batch_seq
                )
        except _Repeat as repeat:
            return repeat.appended
        except IntegrityError:
            if not producer_id:
                raise
            # The batch was appended before (by this replica or another): find its seqs.
            async with self._engine.connect() as conn:
                earlier = await _earlier(conn, workflow_id, tenant_id, producer_id, batch_seq)
            if earlier is None:
                raise
            return _repeat_of(earlier, batch, producer_id, batch_seq)

    async def _append_in(
        self,
        conn: AsyncConnection,
        workflow_id: str,
        tenant_id: str,
        batch: Sequence[NewEvent],
        producer_id: str,
        batch_seq: int,
    ) -> Appended:
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
            if row_update.status.is_terminal:
                # The run is over: its lease means nothing more (the owner stays on record).
                values["lease_expires_at"] = None
        # The bump comes first: it takes the row's write lock (PostgreSQL) or the database's
        # (SQLite) before anything is read, so SQLite never has to upgrade a read
        # transaction. A repeated batch then fails the insert into `appends` (its primary
        # key), which rolls everything back; `append` answers with the earlier seqs. The
        # row lock means the earlier batch is always committed by then.
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
        last_seq = (await conn.execute(bump)).scalar_one_or_none()
        if last_seq is None:
            if producer_id:
                earlier = await _earlier(conn, workflow_id, tenant_id, producer_id, batch_seq)
                if earlier is not None:
                    raise _Repeat(_repeat_of(earlier, batch, producer_id, batch_seq))
            raise _Repeat(await _closed_log_answer(conn, workflow_id, tenant_id, batch))
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
        if producer_id:
            await conn.execute(
                insert(appends).values(
                    workflow_id=workflow_id,
                    producer_id=producer_id,
                    batch_seq=batch_seq,
                    first_seq=first_seq,
                    count=len(batch),
                )
            )
        durable = [event_row(event) for event in stored if event.type not in self._ephemeral]
        if durable:
            await conn.execute(insert(events), durable)
        full = [
            {
                "workflow_id": workflow_id,
                "seq": stored_event.seq,
                "tool_name": event.tool_name,
                "result": event.full_result,
            }
            for event, stored_event in zip(batch, stored, strict=True)
            if event.full_result is not None
        ]
        if full:
            await conn.execute(insert(tool_results), full)
        return Appended(events=stored, seqs=[event.seq for event in stored])

    async def full_results(self, workflow_id: str, seqs: Collection[int]) -> dict[int, str]:
        """Whole results kept for cut TOOL_OBSERVATIONs among `seqs` (callers checked tenancy)."""
        query = select(tool_results.c.seq, tool_results.c.result).where(
            tool_results.c.workflow_id == workflow_id, tool_results.c.seq.in_(sorted(seqs))
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {int(seq): str(result) for seq, result in rows}

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
            await workflow_row(conn, workflow_id, tenant_id)  # tenancy: NotFound if not theirs
            rows = (await conn.execute(query)).mappings().all()
        return [stored_event(row) for row in rows]


async def workflow_row(conn: AsyncConnection, workflow_id: str, tenant_id: str) -> RowMapping:
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


class _Repeat(Exception):
    """Leaves the append transaction (rolling back the bump) with an earlier answer."""

    def __init__(self, appended: Appended) -> None:
        super().__init__("repeat")
        self.appended = appended


async def _earlier(
    conn: AsyncConnection, workflow_id: str, tenant_id: str, producer_id: str, batch_seq: int
) -> RowMapping | None:
    """The record of an earlier append of this batch, after checking the caller's tenant."""
    await workflow_row(conn, workflow_id, tenant_id)
    query = select(appends.c.first_seq, appends.c.count).where(
        appends.c.workflow_id == workflow_id,
        appends.c.producer_id == producer_id,
        appends.c.batch_seq == batch_seq,
    )
    return (await conn.execute(query)).mappings().one_or_none()


def _repeat_of(
    earlier: RowMapping, batch: Sequence[NewEvent], producer_id: str, batch_seq: int
) -> Appended:
    count: int = earlier["count"]
    if count != len(batch):
        raise InvalidArgument(
            f"batch_seq {batch_seq} of producer {producer_id!r} was appended with {count} "
            f"events; this request has {len(batch)}: a retry must resend the same batch"
        )
    first: int = earlier["first_seq"]
    return Appended(events=[], seqs=list(range(first, first + count)), repeated=True)


async def _closed_log_answer(
    conn: AsyncConnection, workflow_id: str, tenant_id: str, batch: Sequence[NewEvent]
) -> Appended:
    """Why the counter bump matched no row: no such workflow (NotFound), or its log has
    ended. A lone STREAM_END then is the producer closing a log the service already closed
    after its terminal event: it gets that STREAM_END's seq back. Anything else is refused."""
    row = await workflow_row(conn, workflow_id, tenant_id)
    last_seq: int = row["last_seq"]
    if [event.type for event in batch] == ["STREAM_END"]:
        return Appended(events=[], seqs=[last_seq], repeated=True)
    error: EventsError = FailedPrecondition(
        f"workflow {workflow_id!r} has ended (its log holds STREAM_END at seq "
        f"{last_seq}); nothing more can be appended"
    )
    raise error
