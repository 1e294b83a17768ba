"""Write statements straight on sqlite3: they write and return what Core's execution would,
never pass through it on the synchronous driver, fail with SQLAlchemy's errors, and go
through Core wherever the driver is another (aiosqlite) or the statement binds values of
its own."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    event,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError

from shuttle.db import UtcDateTime, create_engine, sqlite_sync_engine
from shuttle.sqlite_in_place import locked
from shuttle.sqlite_statements import SqliteStatements, execute_many, first_value

metadata = MetaData()
counters = Table(
    "counters",
    metadata,
    Column("id", String(16), primary_key=True),
    Column("n", Integer, nullable=False),
    Column("closed", Boolean, nullable=False),
    Column("at", UtcDateTime, nullable=False),
)
NOW = datetime(2026, 12, 6, 3, 0, 0, 250000, tzinfo=UTC)
BUMP = (
    update(counters)
    .where(counters.c.id == bindparam("key"), counters.c.closed.is_(False))
    .values(n=counters.c.n + bindparam("by"), at=bindparam("now"))
    .returning(counters.c.n)
)
# Values of its own: bound as compiled (one bind per value of the IN list, the NULL).
BUMP_FIXED = (
    update(counters)
    .where(counters.c.id.in_([literal("a"), literal("b")]), counters.c.id == bindparam("key"))
    .values(n=counters.c.n + bindparam("by"), closed=literal(True))
    .returning(counters.c.n)
)
# An IN list as one value: SQLAlchemy expands it as the statement runs, which only its
# execution does.
BUMP_LISTED = (
    update(counters)
    .where(counters.c.id.in_(["a", "b"]), counters.c.id == bindparam("key"))
    .values(n=counters.c.n + bindparam("by"))
    .returning(counters.c.n)
)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = sqlite_sync_engine(f"sqlite+aiosqlite:///{tmp_path / 'statements.db'}")
    with engine.begin() as conn:
        metadata.create_all(conn)
        conn.execute(insert(counters), [row("a"), row("b"), row("shut", closed=True)])
    yield engine
    engine.dispose()


def row(key: str, *, n: int = 0, closed: bool = False) -> dict[str, Any]:
    return {"id": key, "n": n, "closed": closed, "at": NOW}


def through_core(engine: Engine) -> list[str]:
    """The statements Core's execution runs on `engine` from now on."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement.split()[0])

    event.listen(engine, "before_cursor_execute", record)
    return seen


def stored(engine: Engine) -> dict[str, tuple[Any, ...]]:
    with engine.connect() as conn:
        return {r.id: (r.n, r.closed, r.at) for r in conn.execute(select(counters))}


def test_first_value_runs_straight_on_sqlite3_and_returns_what_core_returns(
    engine: Engine,
) -> None:
    core = through_core(engine)
    later = NOW.astimezone(timezone(timedelta(hours=5))) + timedelta(seconds=1)
    with engine.begin() as conn:
        assert first_value(conn, BUMP, {"key": "a", "by": 3, "now": later}) == 3
        assert first_value(conn, BUMP, {"key": "a", "by": 2, "now": later}) == 5
        # No row: no value, as Core's scalar() gives.
        assert first_value(conn, BUMP, {"key": "shut", "by": 1, "now": later}) is None
    assert core == []
    with engine.begin() as conn:
        assert conn.execute(BUMP, {"key": "b", "by": 5, "now": later}).scalar() == 5
    # Written alike: the UTC instant, stored as Core stores it.
    assert stored(engine)["a"] == (5, False, later)
    assert stored(engine)["b"] == (5, False, later)
    with engine.connect() as conn:
        held: dict[str, str] = dict(conn.exec_driver_sql("SELECT id, at FROM counters").all())
    assert held["a"] == held["b"]


def test_a_statement_binding_fixed_values_of_its_own_runs_straight_on_sqlite3(
    engine: Engine,
) -> None:
    core = through_core(engine)
    with engine.begin() as conn:
        assert first_value(conn, BUMP_FIXED, {"key": "b", "by": 4}) == 4
        assert first_value(conn, BUMP_FIXED, {"key": "shut", "by": 4}) is None
    assert core == []
    assert stored(engine)["b"] == (4, True, NOW)
    assert stored(engine)["shut"] == (0, True, NOW)


def test_a_statement_expanding_a_value_as_it_runs_goes_through_core(engine: Engine) -> None:
    core = through_core(engine)
    with engine.begin() as conn:
        assert first_value(conn, BUMP_LISTED, {"key": "b", "by": 4}) == 4
    assert core == ["UPDATE"]


async def test_on_aiosqlite_statements_go_through_core(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'async.db'}")
    core = through_core(engine.sync_engine)

    def work(conn: Connection) -> Any:
        metadata.create_all(conn)
        execute_many(
            conn,
            "INSERT INTO counters VALUES (?, ?, ?, ?)",
            [("a", 1, 0, "2026-12-06 03:00:00.000000")],
        )
        return first_value(conn, BUMP, {"key": "a", "by": 1, "now": NOW})

    async with engine.begin() as conn:
        assert await conn.run_sync(work) == 2
    await engine.dispose()
    assert core[-2:] == ["INSERT", "UPDATE"]


def test_a_duplicate_row_fails_as_sqlalchemy_s_integrity_error(engine: Engine) -> None:
    statements = SqliteStatements()
    raw = engine.raw_connection()
    driver: sqlite3.Connection = raw.driver_connection  # type: ignore[assignment]
    try:
        with pytest.raises(IntegrityError, match="UNIQUE"):
            statements.commit_alone(driver, insert(counters), row("a"))
        # Rolled back: the connection takes the next transaction.
        assert statements.commit_alone(driver, insert(counters), row("c", n=7)) == 1
    finally:
        raw.close()
    assert stored(engine)["c"] == (7, False, NOW)
    twice = [("d", 0, 0, "2026-12-06 03:00:00.000000")] * 2
    with pytest.raises(IntegrityError), engine.begin() as conn:
        execute_many(conn, "INSERT INTO counters VALUES (?, ?, ?, ?)", twice)
    assert "d" not in stored(engine)


def test_a_file_another_writer_holds_fails_as_a_lock_at_once(engine: Engine) -> None:
    holder = engine.raw_connection()
    holder.driver_connection.execute("BEGIN IMMEDIATE")  # type: ignore[union-attr]
    statements = SqliteStatements()
    raw = engine.raw_connection()
    driver: sqlite3.Connection = raw.driver_connection  # type: ignore[assignment]
    driver.execute("PRAGMA busy_timeout=0")
    try:
        with pytest.raises(OperationalError) as failed:
            statements.commit_alone(driver, insert(counters), row("e"))
        assert locked(failed.value.orig or failed.value)
    finally:
        holder.rollback()
        holder.close()
    assert statements.commit_alone(driver, insert(counters), row("e")) == 1
    raw.close()


def test_a_statement_expanding_a_value_is_refused_alone(engine: Engine) -> None:
    raw = engine.raw_connection()
    driver: sqlite3.Connection = raw.driver_connection  # type: ignore[assignment]
    try:
        with pytest.raises(ValueError, match="only Core's execution"):
            SqliteStatements().commit_alone(driver, BUMP_LISTED, {"key": "a", "by": 1})
    finally:
        raw.close()
    assert stored(engine)["a"][0] == 0


def test_a_statement_is_compiled_apart_for_the_columns_its_parameters_name(
    engine: Engine,
) -> None:
    """The same statement and parameters, compiled to set the columns they name and not:
    two statements, never one taken for the other."""
    statements = SqliteStatements()
    set_n = update(counters).where(counters.c.id == bindparam("key"))
    parameters = {"key": "a", "n": 9}
    raw = engine.raw_connection()
    driver: sqlite3.Connection = raw.driver_connection  # type: ignore[assignment]
    try:
        assert statements.commit_alone(driver, set_n, parameters) == 1
        # Without the names, the UPDATE sets every column, and these parameters lack most.
        assert statements.execute(driver, set_n, parameters) is None
    finally:
        raw.close()
    assert stored(engine)["a"][0] == 9
