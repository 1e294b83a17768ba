"""One events replica per database while there is no Redis.

Without Redis the hot tier is in-process, so a stream wakes only for appends made on its own
replica: a reader on one replica would wait forever for the appends another one takes. So an
events process on a shared database (PostgreSQL) without Redis holds an advisory lock for as
long as it runs, and a second one refuses to start, saying to configure Redis.
"""

from __future__ import annotations

from sqlalchemy import Integer, func, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from shuttle.settings import SettingsError

# The first key of a two-key advisory lock (two-key locks never meet migrations' one-key
# ones; tenant_runs.py takes 0x5E7E); the second is the schema's, so deployments (and test
# runs) in other schemas of one database do not meet.
_LOCK_SPACE = 0x5E7F
_SCHEMA_KEY = func.hashtext(func.current_database() + "." + func.current_schema())


class SoleReplica:
    """The held lock; `release` gives it back (a process that dies loses it with its
    connection)."""

    def __init__(self, connection: AsyncConnection | None) -> None:
        self._connection = connection

    @classmethod
    async def claim(cls, engine: AsyncEngine) -> SoleReplica:
        """Take the lock on PostgreSQL (SettingsError if another replica holds it); nothing
        to take on SQLite, whose file no other machine's replica opens."""
        if engine.dialect.name != "postgresql":
            return cls(None)
        connection = await engine.connect()
        lock = func.pg_try_advisory_lock(literal(_LOCK_SPACE, Integer), _SCHEMA_KEY)
        taken = (await connection.execute(select(lock))).scalar_one()
        await connection.commit()  # a session lock outlives the transaction
        if not taken:
            await connection.close()
            raise SettingsError(
                "another events replica is running on this database without Redis, and "
                "its streams would not see this one's appends; set SHUTTLE_REDIS_URL on "
                "every events replica to run more than one"
            )
        return cls(connection)

    async def release(self) -> None:
        if self._connection is None:
            return
        unlock = func.pg_advisory_unlock(literal(_LOCK_SPACE, Integer), _SCHEMA_KEY)
        await self._connection.execute(select(unlock))
        await self._connection.commit()
        await self._connection.close()
        self._connection = None
