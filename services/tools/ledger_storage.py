"""Where the call ledger lives and how its two statements per call are written.

On a database server the ledger is a table of the service's database, written through the
engine's pool. On a SQLite file it is kept in a file of its own beside the database
(`shuttle.db` → `shuttle-tool-ledger.db`, migrated like the service's database): SQLite
takes one writer per file, and the event log's appends for a tool call land at the moment
the ledger records it, so in one file each waited for the other, a millisecond or more
(SQLite's busy wait sleeps), which cost a run's iteration 1.2 ms more than in a file of its
own (`python -m bench.suites.react_overhead`).

There, the statements run right on the event loop's thread while the file is free
(shuttle/sqlite_in_place.py says why and how): sent to a writer thread, each cost 0.8 to
1.0 ms at the median inside a running stack, against 0.1 ms in place. A file another writer
holds (another replica, the purge) sends the statement to the writer thread, which waits
its turn, and a worker thread checkpoints the log.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql.dml import UpdateBase

from services.tools.db import create_schema
from services.tools.ledger import AutocommitStatements, CallLedger, execute_statement
from shuttle.db import create_engine, run_pragmas, sqlite_path
from shuttle.grpc_server import Cleanup
from shuttle.sql_transactions import WriteTransactions, engine_url, writes_for
from shuttle.sqlite_in_place import Checkpoints, locked, never_waiting_engine

LEDGER_FILE_SUFFIX = "-tool-ledger"
# Statements written in place between two checkpoints: about 2 MiB of log (a call's two
# statements write four pages).
CHECKPOINT_EVERY = 1000
# The ledger file's pages. Each statement writes every page it changes to the log whole (an
# INSERT three, an UPDATE one), though a call's row is a few hundred bytes. Inside the running
# stack the tools service spent 0.40 ms of CPU per call on the ledger at SQLite's default
# 4 KiB, 0.33 ms at 1 KiB (medians of nine `bench.suites.run_cpu` runs; lower in six).
# A file made before keeps its pages.
LEDGER_PAGE_BYTES = 1024


def ledger_url(database_url: str) -> str:
    """The ledger's database: a SQLite file's sibling, else the database itself."""
    path = sqlite_path(database_url)
    if path is None:
        return database_url
    file = Path(path)
    own = file.with_name(f"{file.stem}{LEDGER_FILE_SUFFIX}{file.suffix or '.db'}")
    return make_url(database_url).set(database=str(own)).render_as_string(hide_password=False)


async def open_ledger(engine: AsyncEngine, writes: WriteTransactions) -> tuple[CallLedger, Cleanup]:
    """The ledger of the service whose database `engine` is (`writes` its write
    transactions), and what closes what was opened for it."""
    url = ledger_url(engine_url(engine))
    if url == engine_url(engine):
        if engine.dialect.name == "sqlite":  # in memory: one connection, in its transactions
            return CallLedger(engine, writes), _nothing
        return CallLedger(engine, writes, AutocommitStatements(engine)), _nothing
    own_engine = create_engine(url)
    # First: the size holds only while the file is empty, before the WAL pragma writes it.
    event.listen(own_engine.sync_engine, "connect", _small_pages, insert=True)
    await create_schema(own_engine)
    own_writes = writes_for(own_engine)
    in_place = InPlaceStatements(url, own_writes)

    async def close() -> None:
        await in_place.close()
        await own_writes.close()
        await own_engine.dispose()

    return CallLedger(own_engine, own_writes, in_place), close


async def _nothing() -> None:
    return None


def _small_pages(dbapi_connection: Any, _record: object) -> None:
    run_pragmas(dbapi_connection, f"page_size={LEDGER_PAGE_BYTES}")


@dataclass(frozen=True)
class _Compiled:
    """A statement as SQLite text with positional parameters: each parameter's name, in
    order, and its conversion."""

    sql: str
    conversions: tuple[tuple[str, Callable[[Any], Any] | None], ...]

    def bind(self, parameters: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(
            parameters[name] if convert is None else convert(parameters[name])
            for name, convert in self.conversions
        )


class InPlaceStatements:
    """The ledger's statements of a call, each its own transaction, run on the calling thread
    straight on sqlite3 while the file is free at once; otherwise through `fallback`.

    Each statement is compiled by SQLAlchemy once (per list of parameter names), with the
    columns' own bind conversions, and then run on the DBAPI connection: through Core's
    execution context a statement cost 50 µs more than its 10 µs in SQLite, and a call runs
    two (`python -m bench.suites.tool_ledger`). Parameters go by position: by name, sqlite3
    looks each one up in a dict, about 2 µs a statement for the ledger's 17 columns.
    """

    def __init__(
        self, url: str, fallback: WriteTransactions, checkpoint_every: int = CHECKPOINT_EVERY
    ) -> None:
        self._fallback = fallback
        self._engine: Engine = never_waiting_engine(url)
        self._checkpoints = Checkpoints(self._engine, checkpoint_every)
        self._dialect = sqlite.dialect(paramstyle="qmark")
        self._compiled: dict[tuple[UpdateBase, tuple[str, ...]], _Compiled] = {}
        self._raw: PoolProxiedConnection | None = None

    async def execute(self, statement: UpdateBase, parameters: dict[str, Any]) -> int:
        """Rows the statement touched."""
        compiled = self._compile(statement, parameters)
        if self._raw is None:
            self._raw = self._engine.raw_connection()
        connection: sqlite3.Connection = self._raw.driver_connection  # type: ignore[assignment]
        try:
            touched = connection.execute(compiled.sql, compiled.bind(parameters)).rowcount
            connection.commit()
        except sqlite3.Error as exc:
            connection.rollback()
            if locked(exc):
                return await self._fallback.write(execute_statement, statement, parameters)
            raise DBAPIError.instance(compiled.sql, parameters, exc, sqlite3.Error) from exc
        self._checkpoints.written()
        return touched

    def _compile(self, statement: UpdateBase, parameters: dict[str, Any]) -> _Compiled:
        # The ledger builds each statement's parameters in one order: a tuple keys it.
        key = (statement, tuple(parameters))
        compiled = self._compiled.get(key)
        if compiled is None:
            # column_keys: an UPDATE without values() sets the columns its parameters name.
            sql = statement.compile(dialect=self._dialect, column_keys=list(parameters))
            assert sql.positiontup is not None  # qmark: the parameters' order
            conversions = tuple(
                (name, sql.binds[name].type.bind_processor(self._dialect))
                for name in sql.positiontup
            )
            compiled = self._compiled[key] = _Compiled(str(sql), conversions)
        return compiled

    async def close(self) -> None:
        await self._checkpoints.close()
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        self._engine.dispose()
