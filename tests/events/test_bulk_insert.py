"""insert_rows writes what SQLAlchemy's own executemany writes, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar

import pytest
from sqlalchemy import Column, Connection, MetaData, Table, Text, event, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.bulk_insert import insert_rows
from services.events.migrate import migrate
from services.events.models import events, workflows
from shuttle.db import create_engine, sqlite_sync_engine

T = TypeVar("T")

NOW = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
# The same instant written with another offset, and other instants.
TIMESTAMPS = [NOW, NOW.astimezone(timezone(timedelta(hours=2))), NOW, NOW + timedelta(days=400)]


def _workflow(workflow_id: str) -> dict[str, Any]:
    return {
        "id": workflow_id,
        "tenant_id": "t1",
        "status": "RUNNING",
        "created_at": NOW,
        "updated_at": NOW,
    }


def _rows(workflow_id: str) -> list[dict[str, Any]]:
    return [
        {
            "workflow_id": workflow_id,
            "seq": index + 1,
            "type": "PROGRESS",
            "agent_id": f"agent-{index}",
            "message": "caf\u00e9 \U0001f600" if index % 2 else "",
            "payload": f'{{"n": {index}}}',
            "timestamp": moment,
            "trace_id": "",
        }
        for index, moment in enumerate(TIMESTAMPS)
    ]


def _write(conn: Connection) -> None:
    conn.execute(insert(workflows), [_workflow("wf-sa"), _workflow("wf-bulk")])
    conn.execute(insert(events), _rows("wf-sa"))
    insert_rows(conn, events, _rows("wf-bulk"))


def _read(conn: Connection, workflow_id: str) -> list[dict[str, Any]]:
    query = select(events).where(events.c.workflow_id == workflow_id).order_by(events.c.seq)
    return [{**row, "workflow_id": "-"} for row in conn.execute(query).mappings()]


def _stored_as(conn: Connection, workflow_id: str) -> list[tuple[Any, ...]]:
    """The values as the database holds them, with no type conversion on the way out."""
    columns = "seq, type, agent_id, message, payload, timestamp, trace_id"
    found = conn.exec_driver_sql(f"SELECT workflow_id, {columns} FROM events ORDER BY seq")
    return [tuple(row[1:]) for row in found if row[0] == workflow_id]


async def _in_transaction(engine: AsyncEngine, work: Callable[[Connection], T]) -> T:
    async with engine.begin() as conn:
        return await conn.run_sync(work)


async def test_rows_read_back_as_sqlalchemy_wrote_them(engine: AsyncEngine) -> None:
    await _in_transaction(engine, _write)
    async with engine.connect() as conn:
        by_sqlalchemy = await conn.run_sync(_read, "wf-sa")
        by_bulk = await conn.run_sync(_read, "wf-bulk")
        held_by_sqlalchemy = await conn.run_sync(_stored_as, "wf-sa")
        held_by_bulk = await conn.run_sync(_stored_as, "wf-bulk")
    assert by_bulk == by_sqlalchemy
    assert held_by_bulk == held_by_sqlalchemy
    assert [row["timestamp"] for row in by_bulk] == TIMESTAMPS
    assert all(row["timestamp"].tzinfo is not None for row in by_bulk)


async def test_straight_on_sqlite3_rows_read_back_as_sqlalchemy_wrote_them(
    database_url: str,
) -> None:
    """On the synchronous driver (the store's in-place and writer-thread transactions) the
    rows skip Core's execution."""
    setup = create_engine(database_url)
    await migrate(setup)
    await setup.dispose()
    engine = sqlite_sync_engine(database_url)
    through_core: list[str] = []
    event.listen(
        engine, "before_cursor_execute", lambda *args: through_core.append(args[2].split()[0])
    )
    with engine.begin() as conn:
        _write(conn)
    assert through_core == ["INSERT", "INSERT"]  # _write's own two, by SQLAlchemy
    with engine.connect() as conn:
        assert _read(conn, "wf-bulk") == _read(conn, "wf-sa")
        assert _stored_as(conn, "wf-bulk") == _stored_as(conn, "wf-sa")
    with pytest.raises(IntegrityError), engine.begin() as conn:
        insert_rows(conn, events, _rows("wf-bulk")[:1])
    engine.dispose()


async def test_a_row_missing_a_column_is_refused(engine: AsyncEngine) -> None:
    row = _rows("wf-bulk")[0]
    del row["trace_id"]

    def write(conn: Connection) -> None:
        insert_rows(conn, events, [row])

    with pytest.raises(ValueError, match="must name exactly its columns"):
        await _in_transaction(engine, write)


async def test_no_rows_is_nothing_to_do(engine: AsyncEngine) -> None:
    def write(conn: Connection) -> int:
        insert_rows(conn, events, [])
        return len(conn.execute(select(events.c.seq)).all())

    assert await _in_transaction(engine, write) == 0


async def test_column_types_still_check_values(engine: AsyncEngine) -> None:
    row = _rows("wf-bulk")[0]
    row["timestamp"] = NOW.replace(tzinfo=None)

    def write(conn: Connection) -> None:
        conn.execute(insert(workflows), [_workflow("wf-bulk")])
        insert_rows(conn, events, [row])

    with pytest.raises(ValueError, match="naive datetime"):
        await _in_transaction(engine, write)


async def test_a_row_already_stored_fails_as_an_integrity_error(engine: AsyncEngine) -> None:
    """The store tells a retried batch by this error (see SqlEventStore.append_many)."""

    def write(conn: Connection) -> None:
        conn.execute(insert(workflows), [_workflow("wf-bulk")])
        insert_rows(conn, events, _rows("wf-bulk")[:2])
        insert_rows(conn, events, _rows("wf-bulk")[1:])

    with pytest.raises(IntegrityError):
        await _in_transaction(engine, write)


async def test_a_table_of_one_column(engine: AsyncEngine) -> None:
    table = Table(f"one_column_{uuid.uuid4().hex[:8]}", MetaData(), Column("name", Text))

    def write(conn: Connection) -> list[str]:
        table.create(conn)
        insert_rows(conn, table, [{"name": "first"}, {"name": "second"}])
        found = [str(name) for (name,) in conn.execute(select(table.c.name))]
        table.drop(conn)
        return found

    assert sorted(await _in_transaction(engine, write)) == ["first", "second"]
