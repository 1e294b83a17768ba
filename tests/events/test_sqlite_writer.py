"""On SQLite every write transaction runs whole in one place, and no two writers of this
process ever meet a locked database: small ones (a few appended events, a new workflow)
right on the event loop's thread while the file is free, the rest (large groups, leases,
deletions, and a small one that found the file held) on the store's writer thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import event as sa_event
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.errors import FailedPrecondition
from services.events.leases import LeaseStore
from services.events.migrate import migrate
from services.events.store import IN_PLACE_MAX_EVENTS, SqlEventStore
from shuttle.db import create_engine

from .helpers import new, progress


@pytest.fixture
async def sqlite_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    await migrate(engine)
    yield engine
    await engine.dispose()


Statements = list[tuple[str, str]]
"""(verb, thread name) of each statement SQLite ran."""
VERBS = {"SELECT", "INSERT", "UPDATE", "DELETE"}


@pytest.fixture
def statements() -> Statements:
    return []


@pytest.fixture
async def sqlite_store(
    sqlite_engine: AsyncEngine, statements: Statements
) -> AsyncIterator[SqlEventStore]:
    """A store with workflow wf-1, whose statements from then on are in `statements`."""
    store = SqlEventStore(sqlite_engine)
    record_statements(store, sqlite_engine, statements)
    await store.create_workflow(workflow_id="wf-1", tenant_id="t1")
    statements.clear()
    yield store
    await store.close()


def record_statements(store: SqlEventStore, engine: AsyncEngine, into: Statements) -> None:
    """Every statement SQLite runs from now on, on a connection the store or the engine
    opens from now on: sqlite3's trace sees those run straight on the driver too (an
    executemany once per row)."""

    def record(statement: str) -> None:
        verb = statement.split()[0].upper()
        if verb in VERBS:
            into.append((verb, threading.current_thread().name))

    def trace(dbapi_connection: Any, _record: object) -> None:
        dbapi_connection.set_trace_callback(record)

    def record_core(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        record(statement)

    for append_engine in store.append_engines:
        sa_event.listen(append_engine, "connect", trace)
    # aiosqlite's connections run elsewhere: Core's own hook sees theirs.
    sa_event.listen(engine.sync_engine, "before_cursor_execute", record_core)


async def test_a_small_append_runs_every_statement_on_the_loops_thread(
    sqlite_store: SqlEventStore, statements: Statements
) -> None:
    loop_thread = threading.current_thread().name
    appended = await sqlite_store.append("wf-1", "t1", progress(3), producer_id="p", batch_seq=1)
    assert appended.seqs == [1, 2, 3]
    # The counter bump, then the appends record and the three events, all in place.
    assert statements == [("UPDATE", loop_thread)] + [("INSERT", loop_thread)] * 4
    repeat = await sqlite_store.append("wf-1", "t1", progress(3), producer_id="p", batch_seq=1)
    assert repeat.seqs == [1, 2, 3]
    assert repeat.events == []


async def test_a_large_append_runs_on_the_writer_thread(
    sqlite_store: SqlEventStore, statements: Statements
) -> None:
    appended = await sqlite_store.append("wf-1", "t1", progress(IN_PLACE_MAX_EVENTS + 1))
    assert appended.seqs == list(range(1, IN_PLACE_MAX_EVENTS + 2))
    assert [verb for verb, _ in statements] == ["UPDATE"] + ["INSERT"] * (IN_PLACE_MAX_EVENTS + 1)
    assert all(thread.startswith("sqlite-writer") for _, thread in statements)


async def test_a_small_append_finding_the_file_held_waits_on_the_writer_thread(
    sqlite_store: SqlEventStore, sqlite_engine: AsyncEngine, statements: Statements
) -> None:
    # Another process's write transaction (the tools service shares the file). In place,
    # waiting for it would block the loop and this test for good.
    holder = sqlite3.connect(sqlite_engine.url.database or "", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        pending = asyncio.ensure_future(sqlite_store.append("wf-1", "t1", progress(2)))
        await asyncio.sleep(0.3)
        assert not pending.done()  # waiting its turn on the writer thread, not failing
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert (await pending).seqs == [1, 2]
    # Tried in place first, the bump found the file held; the whole append then ran again.
    assert statements[0] == ("UPDATE", threading.current_thread().name)
    writer = [("UPDATE", "sqlite-writer_0")] + [("INSERT", "sqlite-writer_0")] * 2
    assert statements[1:] == writer
    assert (await sqlite_store.get_workflow("wf-1", "t1")).last_seq == 2


async def test_appends_and_lease_writes_on_the_same_file_interleave(
    sqlite_store: SqlEventStore, sqlite_engine: AsyncEngine
) -> None:
    """Both queue on the store's write lock and run on its writer thread."""
    leases = LeaseStore(sqlite_engine, writes=sqlite_store)
    appends = [sqlite_store.append("wf-1", "t1", [new("PROGRESS")]) for _ in range(20)]
    renewals = [leases.renew("wf-1", "t1", "owner-a", 60_000) for _ in range(20)]
    appended, renewed = await asyncio.gather(asyncio.gather(*appends), asyncio.gather(*renewals))
    assert sorted(seq for one in appended for seq in one.seqs) == list(range(1, 21))
    assert {record.lease_owner for record in renewed} == {"owner-a"}
    assert (await sqlite_store.get_workflow("wf-1", "t1")).last_seq == 20


async def test_new_workflows_in_place_leases_and_deletions_on_the_writer_thread(
    sqlite_store: SqlEventStore, sqlite_engine: AsyncEngine, statements: Statements
) -> None:
    leases = LeaseStore(sqlite_engine, writes=sqlite_store)
    await sqlite_store.create_workflow(workflow_id="wf-2", tenant_id="t1")
    created = [(verb, thread) for verb, thread in statements if verb != "SELECT"]
    assert created == [("INSERT", threading.current_thread().name)]
    statements.clear()
    await leases.renew("wf-2", "t1", "owner-a", 60_000)
    with pytest.raises(FailedPrecondition, match="owner-a"):
        await leases.renew("wf-2", "t1", "owner-b", 60_000)
    written = [(verb, thread) for verb, thread in statements if verb != "SELECT"]
    assert [verb for verb, _ in written] == ["UPDATE", "UPDATE"]
    assert all(thread.startswith("sqlite-writer") for _, thread in written)
    statements.clear()
    deleted, _ = await sqlite_store.delete_workflows("t1", ["wf-2"])
    assert deleted == ["wf-2"]
    assert {verb for verb, _ in statements} == {"SELECT", "DELETE"}
    assert all(thread.startswith("sqlite-writer") for _, thread in statements)
