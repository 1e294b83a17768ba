"""SQLAlchemy's write statements run straight on a pysqlite connection.

Each statement is compiled by SQLAlchemy once (per list of parameter names), to sqlite3's
positional form with the columns' own bind conversions, and then run on the DBAPI
connection. Through Core's execution context a small statement costs about 50 µs of CPU
more than its 10 µs in SQLite (`python -m bench.suites.tool_ledger`), and every tool round
runs several: the tool ledger's two, and each append's counter bump and inserts. A tool
round's two appends, in place on a file in one process, took 0.33 ms of CPU through Core and
0.25 ms straight on sqlite3. Parameters go by position: by name, sqlite3 looks each one up
in a dict.

sqlite3's errors are raised as the SQLAlchemy errors Core raises for them
(`IntegrityError`, `OperationalError`...), so callers handle both paths alike.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.dml import UpdateBase


@dataclass(frozen=True)
class CompiledStatement:
    """A statement as SQLite text with positional parameters: each parameter's name, in
    order, and its conversion; and the values the statement binds itself, by name."""

    sql: str
    conversions: tuple[tuple[str, Callable[[Any], Any] | None], ...]
    fixed: dict[str, Any]

    def bind(self, parameters: dict[str, Any]) -> tuple[Any, ...]:
        if self.fixed:
            parameters = {**self.fixed, **parameters}
        return tuple(
            parameters[name] if convert is None else convert(parameters[name])
            for name, convert in self.conversions
        )


class SqliteStatements:
    """Write statements (INSERT, UPDATE, DELETE) compiled once for sqlite3, run on a driver
    connection."""

    def __init__(self) -> None:
        self._dialect = sqlite.dialect(paramstyle="qmark")
        self._compiled: dict[
            tuple[UpdateBase, tuple[str, ...], bool], CompiledStatement | None
        ] = {}

    def compile(
        self, statement: UpdateBase, parameters: dict[str, Any], *, sets_named: bool = False
    ) -> CompiledStatement | None:
        """`statement` for these parameter names (each call names them in one order: the
        tuple keys the cache, with `sets_named`); None when a value it binds is made as it
        runs (an IN list given as one parameter, which only Core's execution expands, or a
        callable).
        `sets_named`: an INSERT or UPDATE without values() sets the columns its parameters
        name."""
        key = (statement, tuple(parameters), sets_named)
        try:
            return self._compiled[key]
        except KeyError:
            pass
        column_keys = list(parameters) if sets_named else None
        sql = statement.compile(dialect=self._dialect, column_keys=column_keys)
        assert sql.positiontup is not None  # qmark: the parameters' order
        own = {name: sql.binds[name] for name in sql.positiontup if name not in parameters}
        compiled = None
        if not any(bind.expanding or bind.callable or bind.required for bind in own.values()):
            conversions = tuple(
                (name, self._conversion(sql.binds[name].type)) for name in sql.positiontup
            )
            fixed = {name: bind.value for name, bind in own.items()}
            compiled = CompiledStatement(str(sql), conversions, fixed)
        self._compiled[key] = compiled
        return compiled

    def _conversion(self, type_: Any) -> Callable[[Any], Any] | None:
        # What Core applies: the dialect's own form of the type (SQLite's DATETIME, say).
        processor: Callable[[Any], Any] | None = type_.dialect_impl(self._dialect).bind_processor(
            self._dialect
        )
        return processor

    def execute(
        self,
        connection: sqlite3.Connection,
        statement: UpdateBase,
        parameters: dict[str, Any],
        *,
        sets_named: bool = False,
    ) -> sqlite3.Cursor | None:
        """The statement run on `connection`, in whatever transaction it is in; None, and
        nothing run, when it must go through Core (see `compile`)."""
        compiled = self.compile(statement, parameters, sets_named=sets_named)
        if compiled is None:
            return None
        try:
            return connection.execute(compiled.sql, compiled.bind(parameters))
        except sqlite3.Error as exc:
            raise as_sqlalchemy_error(exc, compiled.sql, parameters) from exc

    def commit_alone(
        self, connection: sqlite3.Connection, statement: UpdateBase, parameters: dict[str, Any]
    ) -> int:
        """The statement (its parameters naming the columns it sets) as a transaction of
        its own, rolled back on error; the rows it touched."""
        try:
            cursor = self.execute(connection, statement, parameters, sets_named=True)
            if cursor is None:
                raise ValueError(
                    "this statement binds a value as it runs (an IN list, say), which only "
                    f"Core's execution does; run it through Core: {statement}"
                )
            touched = cursor.rowcount
            try:
                connection.commit()
            except sqlite3.Error as exc:
                raise as_sqlalchemy_error(exc, "COMMIT", parameters) from exc
        except DBAPIError:
            connection.rollback()
            raise
        return touched


# The statements every process builds once at import (each append's counter bumps).
_SHARED = SqliteStatements()


def as_sqlalchemy_error(exc: sqlite3.Error, sql: str, parameters: Any) -> DBAPIError:
    """sqlite3's error as the SQLAlchemy error Core raises for it."""
    error = DBAPIError.instance(sql, parameters, exc, sqlite3.Error)
    assert isinstance(error, DBAPIError)  # always, for an error of the driver's
    return error


def pysqlite_connection(conn: Connection) -> sqlite3.Connection | None:
    """The sqlite3 connection under `conn` when it is one (a SQLite file or memory on the
    synchronous driver), else None (a database server, or aiosqlite's adapter)."""
    if conn.dialect.driver != "pysqlite":
        return None
    driver = conn.connection.driver_connection
    return driver if isinstance(driver, sqlite3.Connection) else None


def first_value(conn: Connection, statement: UpdateBase, parameters: dict[str, Any]) -> Any:
    """The first column of the first row `statement` returns (None without rows), run in
    `conn`'s transaction: straight on sqlite3 where it is under `conn`, else through Core.
    Each statement is compiled once and kept: build it once too (a constant, a cached
    builder)."""
    driver = pysqlite_connection(conn)
    cursor = None if driver is None else _SHARED.execute(driver, statement, parameters)
    if cursor is None:
        return conn.execute(statement, parameters).scalar()
    # fetchall: the statement runs to its end (an UPDATE ... RETURNING, say) before commit.
    rows = cursor.fetchall()
    return rows[0][0] if rows else None


def execute_many(conn: Connection, sql: str, rows: Sequence[Any]) -> None:
    """`sql` (in the dialect's own parameter style) once per row, in `conn`'s transaction:
    straight on sqlite3 where it is under `conn`, else through Core."""
    driver = pysqlite_connection(conn)
    if driver is None:
        conn.exec_driver_sql(sql, list(rows))
        return
    try:
        driver.executemany(sql, rows)
    except sqlite3.Error as exc:
        raise as_sqlalchemy_error(exc, sql, rows) from exc
