"""On SQLite an append transaction runs whole on the store's writer thread: one hand-off
from the event loop however many statements it holds."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import event as sa_event
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.leases import LeaseStore
from services.events.migrate import migrate
from services.events.store import SqlEventStore
from shuttle.db import create_engine

from .helpers import new, progress


@pytest.fixture
async def sqlite_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    await migrate(engine)
    yield engine
    await engine.dispose()


@pytest.fixture
async def sqlite_store(sqlite_engine: AsyncEngine) -> AsyncIterator[SqlEventStore]:
    store = SqlEventStore(sqlite_engine)
    await store.create_workflow(workflow_id="wf-1", tenant_id="t1")
    yield store
    await store.close()


async def test_an_append_runs_every_statement_on_the_writer_thread(
    sqlite_store: SqlEventStore, sqlite_engine: AsyncEngine
) -> None:
    statements: list[tuple[str, str]] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append((statement.split()[0], threading.current_thread().name))

    sa_event.listen(sqlite_store.append_engine, "before_cursor_execute", record)
    sa_event.listen(sqlite_engine.sync_engine, "before_cursor_execute", record)
    appended = await sqlite_store.append("wf-1", "t1", progress(3), producer_id="p", batch_seq=1)
    assert appended.seqs == [1, 2, 3]
    # The counter bump, then the appends record and the events, all on the writer thread.
    assert [verb for verb, _ in statements] == ["UPDATE", "INSERT", "INSERT"]
    assert all(thread.startswith("sqlite-writer") for _, thread in statements)
    repeat = await sqlite_store.append("wf-1", "t1", progress(3), producer_id="p", batch_seq=1)
    assert repeat.seqs == [1, 2, 3]
    assert repeat.events == []


async def test_appends_and_lease_writes_on_the_same_file_interleave(
    sqlite_store: SqlEventStore, sqlite_engine: AsyncEngine
) -> None:
    """Leases write through the async engine, appends through the writer's connection: both
    queue on the store's write lock, so neither meets a locked database."""
    leases = LeaseStore(sqlite_engine, write_lock=sqlite_store.write_lock)
    appends = [sqlite_store.append("wf-1", "t1", [new("PROGRESS")]) for _ in range(20)]
    renewals = [leases.renew("wf-1", "t1", "owner-a", 60_000) for _ in range(20)]
    appended, renewed = await asyncio.gather(asyncio.gather(*appends), asyncio.gather(*renewals))
    assert sorted(seq for one in appended for seq in one.seqs) == list(range(1, 21))
    assert {record.lease_owner for record in renewed} == {"owner-a"}
    assert (await sqlite_store.get_workflow("wf-1", "t1")).last_seq == 20
