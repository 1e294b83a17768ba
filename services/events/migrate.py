"""Schema migrations of the events service's tables (Alembic, own version table).

Event tables without the version table are refused: nothing vouches for their shape.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from shuttle.migrations import Migrations

from .models import metadata

MIGRATIONS = Migrations(
    component="events",
    revisions="services.events:migrations",
    version_table="alembic_version_events",
    lock_key=0x5E_7E_47_01,
    metadata=metadata,
)
VERSION_TABLE = MIGRATIONS.version_table


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Bring the schema to `revision` in one transaction (idempotent)."""
    await MIGRATIONS.upgrade(engine, revision)


async def current_revision(engine: AsyncEngine) -> str | None:
    return await MIGRATIONS.current_revision(engine)
