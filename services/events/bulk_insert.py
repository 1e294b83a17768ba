"""Rows into one table with one executemany, converted as SQLAlchemy converts them but
without its per-row parameter building.

Under a heavy append load (8 workflows appending batches of 100 events, SQLite), building
each row's parameters for SQLAlchemy's executemany (the compiled statement's
``construct_params``, then every column's bind processor, row by row) held the GIL a quarter
of the events service's busy time (``py-spy record --gil``). Here the statement is compiled
once per table, dialect and columns, and a column's bind processor (the one SQLAlchemy would
apply) runs once per distinct value of the call: the events of a group mostly share the
timestamp the log stamped them with.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, Dialect, Table, insert

from shuttle.sqlite_statements import execute_many


@dataclass(frozen=True)
class _Plan:
    sql: str
    keys: tuple[str, ...]
    """Row keys in the order the statement takes them."""
    positional: bool
    pick: Callable[[Mapping[str, Any]], list[Any]]
    """A row's values in `keys` order."""
    processors: tuple[tuple[int, Callable[[Any], Any]], ...]
    """(position in `keys`, bind processor) of each column that has one."""


def insert_rows(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT `rows` into `table` in `conn`'s transaction. Every row names exactly the
    table's columns (no column defaults are applied), and the values of a column with a
    bind processor are hashable."""
    if not rows:
        return
    plan = _plan(table, conn.dialect, frozenset(rows[0]))
    values = [plan.pick(row) for row in rows]
    for position, process in plan.processors:
        converted: dict[Any, Any] = {}
        for row in values:
            value = row[position]
            try:
                row[position] = converted[value]
            except KeyError:
                row[position] = converted[value] = process(value)
    if plan.positional:
        execute_many(conn, plan.sql, [tuple(row) for row in values])
    else:
        execute_many(conn, plan.sql, [dict(zip(plan.keys, row, strict=True)) for row in values])


@functools.lru_cache(maxsize=64)
def _plan(table: Table, dialect: Dialect, keys: frozenset[str]) -> _Plan:
    if keys != set(table.c.keys()):
        raise ValueError(
            f"rows for {table.name} must name exactly its columns {sorted(table.c.keys())}; "
            f"got {sorted(keys)}"
        )
    compiled = insert(table).compile(dialect=dialect, column_keys=list(keys))
    ordered = tuple(compiled.positiontup or ()) if compiled.positional else tuple(sorted(keys))
    processors = []
    for position, key in enumerate(ordered):
        process = table.c[key].type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            processors.append((position, process))
    return _Plan(compiled.string, ordered, compiled.positional, _picker(ordered), tuple(processors))


def _picker(keys: tuple[str, ...]) -> Callable[[Mapping[str, Any]], list[Any]]:
    if len(keys) == 1:  # itemgetter of one key gives the value, not a tuple of it
        (key,) = keys
        return lambda row: [row[key]]
    get = itemgetter(*keys)
    return lambda row: list(get(row))
