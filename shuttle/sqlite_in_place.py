"""Small write transactions on a SQLite file, run right on the event loop's thread.

Sent to a writer thread, a transaction costs two thread switches, and on a busy two-core
host the wait for a core at each switch is most of its time: a lone append's emit to
subscriber takes 1.0 to 1.4 ms at the median that way against 0.75 to 0.9 in place, with the
events service busy 79 % of a core against 73 % (`python -m bench.suites.events_latency
--grpc-only`, one subscriber). In place a transaction must never wait, since it holds the
loop while it runs: its connection's busy timeout is zero,
so a file another writer holds (another process, the purge) fails it at once, and it is
rolled back and sent to the writer thread, which waits its turn. Nor does it checkpoint
the write-ahead log, which syncs the file: a worker thread does, every `CHECKPOINT_EVERY`
transactions. Only small transactions belong here; a large one would stall every stream
the loop serves.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from shuttle.db import run_pragmas, sqlite_sync_engine
from shuttle.sql_transactions import (
    EngineWrites,
    SqliteWriter,
    WriteTransactions,
    engine_url,
    usable,
)

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")
# Transactions committed in place between two checkpoints.
CHECKPOINT_EVERY = 1000


def never_waiting_engine(url: str) -> Engine:
    """A synchronous engine on the SQLite file of `url`, tuned as every other connection to
    it, whose connections neither wait for another writer nor checkpoint."""
    engine = sqlite_sync_engine(url)
    event.listen(engine, "connect", _never_wait)
    return engine


def _never_wait(dbapi_connection: Any, _record: object) -> None:
    # After shuttle.db's own tuning (listeners run in order).
    run_pragmas(dbapi_connection, "busy_timeout=0", "wal_autocheckpoint=0")


def locked(error: BaseException) -> bool:
    """Whether a SQLite error means another writer holds the file."""
    text = str(error)
    return isinstance(error, sqlite3.OperationalError | OperationalError) and (
        "database is locked" in text or "database is busy" in text
    )


class Checkpoints:
    """Checkpoints the file's write-ahead log on a worker thread after every `every`
    transactions written in place."""

    def __init__(self, engine: Engine, every: int = CHECKPOINT_EVERY) -> None:
        self._engine = engine
        self._every = every
        self._written = 0
        self._running: asyncio.Task[None] | None = None

    def written(self) -> None:
        """Count a transaction written; start a checkpoint when one is due."""
        self._written += 1
        if self._written >= self._every and self._running is None:
            self._written = 0
            self._running = asyncio.create_task(asyncio.to_thread(self._checkpoint))
            self._running.add_done_callback(self._done)

    def _checkpoint(self) -> None:
        with self._engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running = None
        if not task.cancelled() and task.exception() is not None:
            log.warning("checkpointing a SQLite log failed", exc_info=task.exception())

    async def close(self) -> None:
        """Wait for a checkpoint under way."""
        if self._running is not None:
            await asyncio.wait([self._running])


class WriteInPlace:
    """`work(connection, ...)` as one write transaction on the calling thread while the file
    is free at once; otherwise given whole to `fallback` (a writer thread that waits)."""

    def __init__(
        self,
        url: str,
        fallback: Callable[..., Any],
        checkpoint_every: int = CHECKPOINT_EVERY,
    ) -> None:
        """`fallback(work, *args, **kwargs)` runs the transaction elsewhere (awaitable)."""
        self.engine = never_waiting_engine(url)
        self._fallback = fallback
        self._checkpoints = Checkpoints(self.engine, checkpoint_every)
        self._connection: Connection | None = None

    async def write(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        if self._connection is None:
            self._connection = self.engine.connect()
        try:
            with self._connection.begin():
                result = work(self._connection, *args, **kwargs)
        except OperationalError as exc:
            if not locked(exc.orig or exc):
                raise
            # Rolled back whole: the transaction runs again, from its start, on the thread.
            fallen_back: _T = await self._fallback(work, *args, **kwargs)
            return fallen_back
        self._checkpoints.written()
        return result

    async def close(self) -> None:
        await self._checkpoints.close()
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self.engine.dispose()


class InPlaceWrites:
    """WriteTransactions of small transactions on a SQLite file: in place while the file is
    free, else whole on the file's writer thread."""

    def __init__(self, url: str, checkpoint_every: int = CHECKPOINT_EVERY) -> None:
        self._writer = SqliteWriter(url)
        self._in_place = WriteInPlace(url, self._writer.run, checkpoint_every)

    async def write(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        return await self._in_place.write(work, *args, **kwargs)

    async def close(self) -> None:
        await self._in_place.close()
        await self._writer.close()


def small_writes_for(engine: AsyncEngine) -> WriteTransactions:
    """Where a process's small write transactions go: in place on a SQLite file, else on
    the engine itself."""
    url = engine_url(engine)
    return InPlaceWrites(url) if usable(url) else EngineWrites(engine)
