"""Where a service's SQL transactions run: whole on threads of their own for a SQLite file,
on the async engine for a database server.

Through aiosqlite, every statement of a transaction is several round trips between the event
loop and the connection's thread (cursor, execute, fetch, close, commit, the pool's reset):
nine for a lone append, four for a workflow lookup. Each waits for the loop's next turn, so
on a loop busy with streams a commit took many turns, and a lookup cost twice the CPU of
the same query run whole on a thread (1.37 against 0.68 ms, measured in-process). On a
thread a transaction is one synchronous call: one round trip whatever it holds.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from shuttle.db import sqlite_path, sqlite_sync_engine

_P = ParamSpec("_P")
_T = TypeVar("_T")
# WAL lets readers run beside the writer and each other; SQLite releases the GIL while it
# reads, so a second thread keeps a slow page read from holding up the next lookup.
READER_THREADS = 2


class WriteTransactions(Protocol):
    """Where write transactions run: `work(connection, ...)`, committed."""

    async def write(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T: ...

    async def close(self) -> None:
        """Release what runs the transactions (an engine stays its owner's)."""
        ...


class EngineWrites:
    """Write transactions straight on an async engine, for a database with many writers."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def write(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        async with self._engine.begin() as conn:
            return await conn.run_sync(work, *args, **kwargs)

    async def close(self) -> None:
        return None


def usable(url: str) -> bool:
    """Whether `url` is a SQLite file (an in-memory database is per connection)."""
    return sqlite_path(url) is not None


def engine_url(engine: AsyncEngine) -> str:
    return engine.url.render_as_string(hide_password=False)


def writes_for(engine: AsyncEngine) -> WriteTransactions:
    """A writer thread on `engine`'s SQLite file, or the engine itself."""
    url = engine_url(engine)
    return SqliteWriter(url) if usable(url) else EngineWrites(engine)


class _SqliteThreads:
    """A synchronous engine on the file, and the threads its transactions run on.

    Each thread keeps its connection: checking one out of the pool and back for every
    transaction (with the pool's reset) took a tenth of the writer thread's time under a
    stream of small appends (py-spy), and a sixth of the CPU of a small write and read."""

    def __init__(self, url: str, threads: int, name: str, *, commits: bool) -> None:
        self.engine = sqlite_sync_engine(url)
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._commits = commits
        self._local = threading.local()
        self._connections: list[Connection] = []

    def _connection(self) -> Connection:
        """This thread's connection, opened on its first transaction."""
        conn: Connection | None = getattr(self._local, "connection", None)
        if conn is None:
            conn = self.engine.connect()
            self._local.connection = conn
            self._connections.append(conn)
        return conn

    async def run(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """`work(connection, ...)` as one transaction on a thread: committed for a writer,
        rolled back (one snapshot) for readers."""

        def transaction() -> _T:
            conn = self._connection()
            if self._commits:
                with conn.begin():
                    return work(conn, *args, **kwargs)
            try:
                return work(conn, *args, **kwargs)
            finally:
                conn.rollback()

        return await asyncio.get_running_loop().run_in_executor(self._threads, transaction)

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        self._threads.shutdown(wait=True)
        for conn in self._connections:
            conn.close()  # pysqlite lets another thread close a file connection
        self._connections.clear()
        self.engine.dispose()


class SqliteWriter(_SqliteThreads):
    """Write transactions, on one dedicated thread (SQLite takes one writer at a time)."""

    def __init__(self, url: str) -> None:
        super().__init__(url, 1, "sqlite-writer", commits=True)

    async def write(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        return await self.run(work, *args, **kwargs)


class SqliteReaders(_SqliteThreads):
    """Read transactions, on READER_THREADS threads."""

    def __init__(self, url: str) -> None:
        super().__init__(url, READER_THREADS, "sqlite-reader", commits=False)
