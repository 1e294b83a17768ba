"""Write transactions on SQLite run whole on one database thread.

Through aiosqlite, every statement of a transaction is several round trips between the event
loop and the connection's thread (cursor, execute, fetch, close, commit, the pool's reset):
nine for a lone append. Each waits for the loop's next turn, so on a loop busy with streams
a commit took many turns. Here the transaction runs as one synchronous call on a thread of
its own: one round trip whatever it holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Concatenate, ParamSpec, TypeVar

from sqlalchemy import Connection

from shuttle.db import sqlite_path, sqlite_sync_engine

_P = ParamSpec("_P")
_T = TypeVar("_T")


class SqliteWriter:
    """Runs `work(connection, ...)` inside a transaction on a synchronous engine opened on
    the same file, in one dedicated thread (callers still queue on the store's write lock)."""

    def __init__(self, url: str) -> None:
        self.engine = sqlite_sync_engine(url)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-writer")

    @staticmethod
    def usable(url: str) -> bool:
        """Whether `url` is a SQLite file (an in-memory database is per connection)."""
        return sqlite_path(url) is not None

    async def run(
        self, work: Callable[Concatenate[Connection, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        def transaction() -> _T:
            with self.engine.begin() as conn:
                return work(conn, *args, **kwargs)

        return await asyncio.get_running_loop().run_in_executor(self._thread, transaction)

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self.engine.dispose()
