"""The tasks submitted through this gateway, per tenant: listing and Idempotency-Key.

A key is reserved by inserting its row before the run starts; the unique constraint on
(tenant, key) makes exactly one of several concurrent requests the one that starts it. A
reservation whose request died before starting the run would hold the key for good, so one
left without a workflow for longer than SHUTTLE_IDEMPOTENCY_RESERVATION_SECONDS is taken
over by the next request with the key.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.stores.db import tasks
from gateway.stores.sessions import NewTurn, record_turn
from shuttle.sql_transactions import EngineWrites, WriteTransactions

# How long a repeated request waits for the first one to finish starting its run.
RESERVATION_WAIT_SECONDS = 10.0


class KeyReuseError(Exception):
    """The Idempotency-Key was used before with a different request."""


class KeyInFlightError(Exception):
    """The request holding this Idempotency-Key has not started its run yet."""


@dataclass(frozen=True)
class TaskEntry:
    workflow_id: str
    query: str
    created_at: datetime


@dataclass(frozen=True)
class KeyedTask:
    workflow_id: str
    client_message_id: str | None


@dataclass(frozen=True)
class Reservation:
    row_id: int | None
    """Set when this request holds the key and must start the run."""
    workflow_id: str | None
    """Set when an earlier request with the same key already started it."""
    reserved_at: datetime | None = None
    """When this request took the key: a later request that took it over since (this one
    looked dead) changed it, and this one's complete or release then does nothing."""


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class TaskIndex:
    def __init__(
        self,
        engine: AsyncEngine,
        stale_after_seconds: float = 60.0,
        writes: WriteTransactions | None = None,
    ) -> None:
        self._engine = engine
        self._writes = writes or EngineWrites(engine)
        """Where a submission's two transactions run, whole (on a SQLite file in place, or
        its writer thread while another writer holds it): through aiosqlite each statement
        is several round trips to its thread, and a task's two transactions cost the gateway
        three times the CPU."""
        self.stale_after_seconds = stale_after_seconds
        self._stale_after = timedelta(seconds=stale_after_seconds)
        """A reservation this old without a workflow is taken to be dead (its request died
        part-way: process killed, backend down) and is taken over by the next request."""

    async def reserve(
        self,
        tenant_id: str,
        idempotency_key: str | None,
        digest: str,
        query: str,
        client_message_id: str | None = None,
    ) -> Reservation:
        now = datetime.now(UTC)
        row = {
            "tenant_id": tenant_id,
            "idempotency_key": idempotency_key,
            "request_hash": digest,
            "query": query,
            "created_at": now,
            "client_message_id": client_message_id,
        }
        try:
            row_id = await self._writes.write(_insert_task, row)
            return Reservation(row_id=row_id, workflow_id=None, reserved_at=now)
        except IntegrityError:
            if idempotency_key is None:
                raise
        return await self._wait_for(tenant_id, idempotency_key, digest)

    async def _wait_for(self, tenant_id: str, idempotency_key: str, digest: str) -> Reservation:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RESERVATION_WAIT_SECONDS
        delay = 0.02
        while True:
            async with self._engine.connect() as conn:
                row = (
                    await conn.execute(
                        select(
                            tasks.c.id,
                            tasks.c.request_hash,
                            tasks.c.workflow_id,
                            tasks.c.created_at,
                        ).where(
                            tasks.c.tenant_id == tenant_id,
                            tasks.c.idempotency_key == idempotency_key,
                        )
                    )
                ).first()
            if row is not None and row.request_hash != digest:
                raise KeyReuseError
            if row is not None and row.workflow_id:
                return Reservation(None, str(row.workflow_id))
            if row is not None and (taken := await self._take_over(row.id)) is not None:
                return taken
            # No row: the holder failed to start its run and gave the key back.
            if row is None or loop.time() > deadline:
                raise KeyInFlightError
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _take_over(self, row_id: int) -> Reservation | None:
        """Hold the key of a reservation that has gone stale without a workflow; None while
        it is fresh, or when another request took it over first."""
        now = datetime.now(UTC)
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(tasks)
                .where(
                    tasks.c.id == row_id,
                    tasks.c.workflow_id.is_(None),
                    tasks.c.created_at < now - self._stale_after,
                )
                .values(created_at=now)
            )
        return Reservation(row_id, None, now) if result.rowcount == 1 else None

    async def complete(self, reservation: Reservation, workflow_id: str, turn: NewTurn) -> None:
        """Record the run the reservation started and, in the same transaction, its turn
        (and its session, when new): together or not at all."""
        await self._writes.write(_complete, reservation, workflow_id, turn)

    async def release(self, reservation: Reservation) -> None:
        """Give the key back after the run failed to start, so a retry can try again."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(tasks).where(*_held(reservation)))

    async def keyed(self, tenant_id: str, idempotency_key: str) -> KeyedTask | None:
        """The task the tenant's request with this Idempotency-Key started, if it has."""
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(tasks.c.workflow_id, tasks.c.client_message_id).where(
                        tasks.c.tenant_id == tenant_id,
                        tasks.c.idempotency_key == idempotency_key,
                        tasks.c.workflow_id.is_not(None),
                    )
                )
            ).first()
        return None if row is None else KeyedTask(row.workflow_id, row.client_message_id)

    async def recent(self, tenant_id: str, limit: int) -> list[TaskEntry]:
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(tasks.c.workflow_id, tasks.c.query, tasks.c.created_at)
                    .where(tasks.c.tenant_id == tenant_id, tasks.c.workflow_id.is_not(None))
                    .order_by(tasks.c.id.desc())
                    .limit(limit)
                )
            ).all()
        return [TaskEntry(r.workflow_id, r.query, r.created_at) for r in rows]


def _held(reservation: Reservation) -> tuple[ColumnElement[bool], ...]:
    """The row of a reservation for as long as it is still this request's."""
    return (
        tasks.c.id == reservation.row_id,
        tasks.c.workflow_id.is_(None),
        tasks.c.created_at == reservation.reserved_at,
    )


def _insert_task(conn: Connection, row: dict[str, Any]) -> int:
    (row_id,) = conn.execute(insert(tasks).values(**row)).inserted_primary_key or (0,)
    return int(row_id or 0)


def _complete(conn: Connection, reservation: Reservation, workflow_id: str, turn: NewTurn) -> None:
    conn.execute(update(tasks).where(*_held(reservation)).values(workflow_id=workflow_id))
    record_turn(conn, turn)
