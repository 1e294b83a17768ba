"""Where the call ledger lives and how its two statements per call are written.

On a database server the ledger is a table of the service's database, written through the
engine's pool. On a SQLite file it is kept in a file of its own beside the database
(`shuttle.db` → `shuttle-tool-ledger.db`, migrated like the service's database): SQLite
takes one writer per file, and the event log's appends for a tool call land at the moment
the ledger records it, so in one file each waited for the other, a millisecond or more
(SQLite's busy wait sleeps), which cost a run's iteration 1.2 ms more than in a file of its
own (`python -m bench.suites.react_overhead`).

There, the statements run right on the event loop's thread while the file is free. Sent to
a writer thread, each cost two thread switches, and on a busy two-core host the wait for a
core at each switch was most of its time (0.8 ms and 1.0 ms at the median inside a running
stack, against 0.1 ms in place). In place it never waits: the connection's busy timeout is
zero, so a file another writer holds (another replica, the purge) fails the statement at
once and it goes to the writer thread, which waits its turn; nor does it checkpoint the
write-ahead log (which syncs the file) on the loop: every `CHECKPOINT_EVERY` statements a
thread of the default executor does.
"""

from __future__ import annotations

import asyncio
import logging
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
from shuttle.db import create_engine, sqlite_path, sqlite_sync_engine
from shuttle.grpc_server import Cleanup
from shuttle.sql_transactions import WriteTransactions, engine_url, writes_for

log = logging.getLogger(__name__)

LEDGER_FILE_SUFFIX = "-tool-ledger"
# Statements written in place between two checkpoints: about 4 MiB of log at 1 page each.
CHECKPOINT_EVERY = 1000


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


def _locked(error: sqlite3.OperationalError) -> bool:
    return "database is locked" in str(error) or "database is busy" in str(error)


@dataclass(frozen=True)
class _Compiled:
    """A statement as SQLite text with named parameters, and each parameter's conversion."""

    sql: str
    conversions: tuple[tuple[str, Callable[[Any], Any] | None], ...]

    def bind(self, parameters: dict[str, Any]) -> dict[str, Any]:
        return {
            name: parameters[name] if convert is None else convert(parameters[name])
            for name, convert in self.conversions
        }


class InPlaceStatements:
    """The ledger's statements of a call, each its own transaction, run on the calling thread
    straight on sqlite3 while the file is free at once; otherwise through `fallback`.

    Each statement is compiled by SQLAlchemy once (per set of parameter names), with the
    columns' own bind conversions, and then run on the DBAPI connection: through Core's
    execution context a statement cost 50 µs more than its 10 µs in SQLite, and a call runs
    two (`python -m bench.suites.tool_ledger`).
    """

    def __init__(
        self, url: str, fallback: WriteTransactions, checkpoint_every: int = CHECKPOINT_EVERY
    ) -> None:
        self._fallback = fallback
        self._checkpoint_every = checkpoint_every
        self._engine: Engine = sqlite_sync_engine(url)
        event.listen(self._engine, "connect", _never_wait)
        self._dialect = sqlite.dialect(paramstyle="named")
        self._compiled: dict[tuple[UpdateBase, frozenset[str]], _Compiled] = {}
        self._raw: PoolProxiedConnection | None = None
        self._written = 0
        self._checkpoint: asyncio.Task[None] | None = None

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
            if isinstance(exc, sqlite3.OperationalError) and _locked(exc):
                return await self._fallback.write(execute_statement, statement, parameters)
            raise DBAPIError.instance(compiled.sql, parameters, exc, sqlite3.Error) from exc
        self._written += 1
        if self._written >= self._checkpoint_every and self._checkpoint is None:
            self._written = 0
            self._checkpoint = asyncio.create_task(asyncio.to_thread(self._checkpoint_log))
            self._checkpoint.add_done_callback(self._checkpointed)
        return touched

    def _compile(self, statement: UpdateBase, parameters: dict[str, Any]) -> _Compiled:
        key = (statement, frozenset(parameters))
        compiled = self._compiled.get(key)
        if compiled is None:
            # column_keys: an UPDATE without values() sets the columns its parameters name.
            sql = statement.compile(dialect=self._dialect, column_keys=list(parameters))
            conversions = tuple(
                (name, bind.type.bind_processor(self._dialect)) for name, bind in sql.binds.items()
            )
            compiled = self._compiled[key] = _Compiled(str(sql), conversions)
        return compiled

    def _checkpoint_log(self) -> None:
        with self._engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

    def _checkpointed(self, task: asyncio.Task[None]) -> None:
        self._checkpoint = None
        if not task.cancelled() and task.exception() is not None:
            log.warning("checkpointing the tool ledger failed", exc_info=task.exception())

    async def close(self) -> None:
        if self._checkpoint is not None:
            await asyncio.wait([self._checkpoint])
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        self._engine.dispose()


def _never_wait(dbapi_connection: object, _record: object) -> None:
    # After shuttle.db's own tuning (listeners run in order): no busy wait, no checkpoint.
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    try:
        cursor.execute("PRAGMA busy_timeout=0")
        cursor.execute("PRAGMA wal_autocheckpoint=0")
    finally:
        cursor.close()
