"""Schema migrations of the events service's tables (Alembic, own version table)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, inspect
from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS = Path(__file__).with_name("migrations")
# Each service owns its tables and its own version table, so they migrate independently.
VERSION_TABLE = "alembic_version_events"
# Taken on PostgreSQL so replicas starting together migrate one after the other.
ADVISORY_LOCK_KEY = 0x5E_7E_47_01


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


class UnversionedSchema(RuntimeError):
    """The database has event tables that no migration created."""


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Bring the schema to `revision` in one transaction (idempotent)."""

    def upgrade(sync: Connection) -> None:
        tables = set(inspect(sync).get_table_names())
        if "workflows" in tables and VERSION_TABLE not in tables:
            raise UnversionedSchema(
                f"{engine.url.render_as_string()}: its event tables predate migrations "
                f"(no {VERSION_TABLE} table); remove that database (the embedded default "
                "is var/shuttle.db) or migrate it by hand"
            )
        command.upgrade(alembic_config(sync), revision)

    async with engine.begin() as conn:
        await conn.run_sync(upgrade)


async def current_revision(engine: AsyncEngine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    def read(sync: Connection) -> str | None:
        context = MigrationContext.configure(sync, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(read)
