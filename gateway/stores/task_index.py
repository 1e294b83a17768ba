"""The tasks submitted through this gateway, per tenant: listing and Idempotency-Key.

A key is reserved by inserting its row before the run starts; the unique constraint on
(tenant, key) makes exactly one of several concurrent requests the one that starts it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.stores.db import tasks

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
class Reservation:
    row_id: int | None
    """Set when this request holds the key and must start the run."""
    workflow_id: str | None
    """Set when an earlier request with the same key already started it."""


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class TaskIndex:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def reserve(
        self, tenant_id: str, idempotency_key: str | None, digest: str, query: str
    ) -> Reservation:
        try:
            async with self._engine.begin() as conn:
                result = await conn.execute(
                    insert(tasks).values(
                        tenant_id=tenant_id,
                        idempotency_key=idempotency_key,
                        request_hash=digest,
                        query=query,
                        created_at=datetime.now(UTC),
                    )
                )
                (row_id,) = result.inserted_primary_key or (0,)
                return Reservation(row_id=int(row_id or 0), workflow_id=None)
        except IntegrityError:
            if idempotency_key is None:
                raise
        return Reservation(None, await self._wait_for(tenant_id, idempotency_key, digest))

    async def _wait_for(self, tenant_id: str, idempotency_key: str, digest: str) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RESERVATION_WAIT_SECONDS
        delay = 0.02
        while True:
            async with self._engine.connect() as conn:
                row = (
                    await conn.execute(
                        select(tasks.c.request_hash, tasks.c.workflow_id).where(
                            tasks.c.tenant_id == tenant_id,
                            tasks.c.idempotency_key == idempotency_key,
                        )
                    )
                ).first()
            if row is not None and row.request_hash != digest:
                raise KeyReuseError
            if row is not None and row.workflow_id:
                return str(row.workflow_id)
            # No row: the holder failed to start its run and gave the key back.
            if row is None or loop.time() > deadline:
                raise KeyInFlightError
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def complete(self, row_id: int, workflow_id: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                update(tasks).where(tasks.c.id == row_id).values(workflow_id=workflow_id)
            )

    async def release(self, row_id: int) -> None:
        """Give the key back after the run failed to start, so a retry can try again."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(tasks).where(tasks.c.id == row_id))

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
