"""Durable tier of the workflow log: the workflow registry and durable events in SQL."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, Select, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from shuttle.envelope import EPHEMERAL_TYPES
from shuttle.sql_transactions import (
    EngineWrites,
    SqliteReaders,
    SqliteWriter,
    engine_url,
    usable,
)
from shuttle.sqlite_in_place import WriteInPlace
from shuttle.utf8 import storable_text

from .append_tx import Outcome, append_group, earlier_append, repeat_of, workflow_row
from .errors import AlreadyExists, EventsError
from .models import appends, events, tool_results, workflows
from .pages import SizedPage, read_page
from .records import (
    Appended,
    AppendRequest,
    NewEvent,
    WorkflowRecord,
    WorkflowStatus,
)
from .rows import workflow_record
from .tenant_runs import insert_workflow

Clock = Callable[[], datetime]
_P = ParamSpec("_P")
_T = TypeVar("_T")
# A group of appends at most this many events long commits in place on a SQLite file: a few
# milliseconds' hold of the loop at worst, while a larger one goes to the writer thread.
IN_PLACE_MAX_EVENTS = 64
EVENTS_CHECKPOINT_EVERY = 100


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
        tenant_max_runs: int = 0,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._ephemeral = frozenset(ephemeral_types)
        self._tenant_max_runs = tenant_max_runs
        # SQLite has one writer at a time. Queueing this process's appends here costs
        # nothing, while letting them collide makes SQLite's busy handler sleep in steps of
        # up to 100 ms (measured: a third of the throughput with 8 concurrent workflows).
        self.single_writer = engine.dialect.name == "sqlite"
        """Whether the database takes one write transaction at a time."""
        self._write_lock = asyncio.Lock() if self.single_writer else contextlib.nullcontext()
        self._engine_writes = EngineWrites(engine)
        url = engine_url(engine)
        on_file = self.single_writer and usable(url)
        self._sqlite_writer = SqliteWriter(url) if on_file else None
        self._sqlite_readers = SqliteReaders(url) if on_file else None
        # A checkpoint every EVENTS_CHECKPOINT_EVERY appends keeps the log near SQLite's own
        # bound (1,000 pages): an append writes several pages.
        self._in_place = (
            WriteInPlace(url, self._sqlite_writer.run, EVENTS_CHECKPOINT_EVERY)
            if self._sqlite_writer is not None
            else None
        )

    async def create_workflow(
        self,
        *,
        workflow_id: str,
        tenant_id: str,
        owner: str = "",
        query: str = "",
        session_id: str = "",
        spec_json: str = "",
        lease_owner: str = "",
        lease_ttl_ms: int = 0,
    ) -> WorkflowRecord:
        """Register a workflow with an empty log; AlreadyExists if the id is taken,
        ResourceExhausted if the tenant has as many active workflows as it may have. With a
        `lease_owner` it is created leased to it at epoch 1 for `lease_ttl_ms`, so no
        claimer can take it between its creation and its first renewal."""
        now = self._clock()
        owner, query, session_id, spec_json = map(
            storable_text, (owner, query, session_id, spec_json)
        )
        leased = bool(lease_owner)
        expires = now + timedelta(milliseconds=lease_ttl_ms) if leased else None
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
            lease_owner=lease_owner,
            lease_expires_at=expires,
            lease_epoch=1 if leased else 0,
        )
        row = {
            "id": workflow_id,
            "tenant_id": tenant_id,
            "owner": owner,
            "status": record.status.value,
            "query": query,
            "session_id": session_id,
            "last_seq": 0,
            "created_at": now,
            "updated_at": now,
            "lease_owner": lease_owner,
            "lease_expires_at": expires,
            "lease_epoch": record.lease_epoch,
            "spec": spec_json,
        }
        try:
            await self.write_small(insert_workflow, row, self._tenant_max_runs)
        except IntegrityError:
            # Whichever tenant holds the id, saying so leaks nothing but "taken".
            raise AlreadyExists(f"workflow {workflow_id!r} already exists") from None
        return record

    async def delete_workflows(
        self, tenant_id: str, workflow_ids: Collection[str]
    ) -> tuple[list[str], int]:
        """Delete the tenant's workflows among `workflow_ids` whole, in one transaction;
        (the ids deleted, how many events went with them). Others' ids are left alone."""
        return await self.write(_delete_workflows, tenant_id, workflow_ids)

    async def get_workflow(
        self, workflow_id: str, tenant_id: str, *, with_spec: bool = False
    ) -> WorkflowRecord:
        """The workflow's row (its spec_json only `with_spec`); NotFound when missing or
        owned by another tenant."""
        return await self.read(_workflow, workflow_id, tenant_id, with_spec)

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
        request = AppendRequest(workflow_id, tenant_id, batch, producer_id, batch_seq)
        (outcome,) = await self.append_many([request])
        if isinstance(outcome, EventsError):
            raise outcome
        return outcome

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[Outcome]:
        """Append several batches (any workflows) in one transaction: one commit for all.

        Outcomes come in request order; a batch refused on its own (NotFound, a closed log,
        a mismatched retry) gets its error without failing the others. When a batch turns
        out to be a repeat only at insert time, the group is rolled back and each batch
        appended in a transaction of its own, so the others still commit exactly once.
        """
        try:
            return await self._append_together(requests)
        except IntegrityError as conflict:
            if len(requests) == 1:
                return [await self._after_conflict(requests[0], conflict)]
        outcomes: list[Outcome] = []
        for request in requests:
            try:
                (outcome,) = await self._append_together([request])
            except IntegrityError as conflict:
                outcome = await self._after_conflict(request, conflict)
            outcomes.append(outcome)
        return outcomes

    async def write(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """Run `work(connection, ...)` as one write transaction: on SQLite queued behind this
        process's other writers and run whole on the writer thread, elsewhere on the async
        engine. Every write of the log's tables (appends, new workflows, leases) goes here."""
        async with self._write_lock:
            if self._sqlite_writer is not None:
                return await self._sqlite_writer.run(work, *args, **kwargs)
            return await self._engine_writes.write(work, *args, **kwargs)

    async def write_small(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """`write`, for a transaction of a few rows: on a SQLite file it runs right on the
        event loop's thread while the file is free (shuttle.sqlite_in_place), saving the
        two thread switches that were most of a lone append's time on a busy host."""
        async with self._write_lock:
            if self._in_place is not None:
                return await self._in_place.write(work, *args, **kwargs)
            return await self._engine_writes.write(work, *args, **kwargs)

    async def read(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """Run `work(connection, ...)` as one read transaction: on a SQLite file whole on a
        reader thread, elsewhere on the async engine."""
        if self._sqlite_readers is not None:
            return await self._sqlite_readers.run(work, *args, **kwargs)
        async with self._engine.connect() as conn:
            return await conn.run_sync(work, *args, **kwargs)

    async def _append_together(self, requests: Sequence[AppendRequest]) -> list[Outcome]:
        small = sum(len(request.batch) for request in requests) <= IN_PLACE_MAX_EVENTS
        write = self.write_small if small else self.write
        return await write(append_group, requests, self._clock(), self._ephemeral)

    @property
    def append_engines(self) -> tuple[Engine, ...]:
        """The engines append transactions commit on."""
        if self._sqlite_writer is not None and self._in_place is not None:
            return (self._in_place.engine, self._sqlite_writer.engine)
        return (self._engine.sync_engine,)

    async def close(self) -> None:
        """Release the SQLite threads and their connections (the engine is the caller's)."""
        if self._in_place is not None:
            await self._in_place.close()
            self._in_place = None
        for threads in (self._sqlite_writer, self._sqlite_readers):
            if threads is not None:
                await threads.close()
        self._sqlite_writer = self._sqlite_readers = None

    async def _after_conflict(self, request: AppendRequest, conflict: IntegrityError) -> Outcome:
        """The batch collided with a stored one: a retry (by this replica or another)
        answered with the earlier seqs. Without a producer id nothing explains it."""
        if not request.producer_id:
            raise conflict
        try:
            earlier = await self.read(earlier_append, request)
            if earlier is None:
                raise conflict
            return repeat_of(earlier, request)
        except EventsError as refused:
            return refused

    async def full_results(self, workflow_id: str, seqs: Collection[int]) -> dict[int, str]:
        """Whole results kept for cut TOOL_OBSERVATIONs among `seqs` (callers checked tenancy)."""
        query = select(tool_results.c.seq, tool_results.c.result).where(
            tool_results.c.workflow_id == workflow_id, tool_results.c.seq.in_(sorted(seqs))
        )
        return await self.read(_full_results, query)

    async def events_page(
        self,
        workflow_id: str,
        tenant_id: str,
        *,
        from_seq: int = 1,
        to_seq: int | None = None,
        limit: int = 100,
        max_bytes: int,
        types: Collection[str] | None = None,
        whole_results: bool = False,
    ) -> SizedPage:
        """Durable events with ``from_seq <= seq <= to_seq`` (of `types`, when given), oldest
        first, at most `limit` and stopped where their sizes pass `max_bytes` (the first
        whatever its size); NotFound when the workflow is not this tenant's. See
        ``pages.read_page``."""
        return await self.read(
            read_page,
            workflow_id,
            tenant_id,
            from_seq=from_seq,
            to_seq=to_seq,
            limit=limit,
            max_bytes=max_bytes,
            types=types,
            whole_results=whole_results,
        )


def _workflow(
    conn: Connection, workflow_id: str, tenant_id: str, with_spec: bool
) -> WorkflowRecord:
    return workflow_record(workflow_row(conn, workflow_id, tenant_id, with_spec=with_spec))


def _full_results(conn: Connection, query: Select[Any]) -> dict[int, str]:
    return {int(seq): str(result) for seq, result in conn.execute(query)}


def _delete_workflows(
    conn: Connection, tenant_id: str, workflow_ids: Collection[str]
) -> tuple[list[str], int]:
    found = conn.execute(
        select(workflows.c.id).where(
            workflows.c.tenant_id == tenant_id, workflows.c.id.in_(workflow_ids)
        )
    ).scalars()
    ids = sorted(str(i) for i in found)
    if not ids:
        return [], 0
    # Children first, explicitly: SQLite only cascades with foreign keys switched on.
    for table in (tool_results, appends):
        conn.execute(delete(table).where(table.c.workflow_id.in_(ids)))
    removed = conn.execute(delete(events).where(events.c.workflow_id.in_(ids)))
    conn.execute(delete(workflows).where(workflows.c.id.in_(ids)))
    return ids, removed.rowcount or 0
