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
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
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
from shuttle.sqlite_statements import SqliteStatements

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


class InPlaceStatements:
    """The ledger's statements of a call, each its own transaction, run on the calling thread
    straight on sqlite3 (shuttle/sqlite_statements.py) while the file is free at once;
    otherwise through `fallback`."""

    def __init__(
        self, url: str, fallback: WriteTransactions, checkpoint_every: int = CHECKPOINT_EVERY
    ) -> None:
        self._fallback = fallback
        self._engine: Engine = never_waiting_engine(url)
        self._checkpoints = Checkpoints(self._engine, checkpoint_every)
        self._statements = SqliteStatements()
        self._raw: PoolProxiedConnection | None = None

    async def execute(self, statement: UpdateBase, parameters: dict[str, Any]) -> int:
        """Rows the statement touched."""
        if self._raw is None:
            self._raw = self._engine.raw_connection()
        connection: sqlite3.Connection = self._raw.driver_connection  # type: ignore[assignment]
        try:
            touched = self._statements.commit_alone(connection, statement, parameters)
        except DBAPIError as exc:
            if locked(exc.orig or exc):
                return await self._fallback.write(execute_statement, statement, parameters)
            raise
        self._checkpoints.written()
        return touched

    async def close(self) -> None:
        await self._checkpoints.close()
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        self._engine.dispose()
