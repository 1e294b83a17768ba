"""Alembic migrations of the tables a component owns (a service, the gateway), every
component's run the same way.

Each component keeps its revisions in a folder of its package and has its own version
table, so components share one database and still migrate independently. A run is one
transaction that first takes a lock (on PostgreSQL the advisory lock of the component's key,
on SQLite the database's write lock), so replicas starting together migrate one after
another and the later ones find the schema at head.

A database may hold a component's tables without its version table: tables no migration
recorded. The component chooses how to treat them (`adopt_at`):
- unset: refused (`UnversionedSchema`), since nothing vouches for their shape;
- a revision: they are taken as the tables `create_all` of the component's metadata makes,
  which is how a database such as an existing var/shuttle.db got them. If they are exactly
  the tables that revision makes (the same tables with the same columns, as the revision
  makes them on a scratch in-memory database), the database is stamped at that revision and
  migrated on from there, its rows kept; tables of any other shape are refused, as stamping
  them would record a schema they do not have.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, MetaData, create_engine, inspect, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from shuttle.db import SQLITE_BUSY_TIMEOUT_MS

# Alembic's env.py and the template of new revisions, shared by every component.
ENVIRONMENT = Path(__file__).with_name("migration_env")
# Alembic's `context` and `op` are module-wide, so a process runs one migration at a time:
# two components' runs on one event loop would otherwise interleave at each query.
_RUNNING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _sqlite_locked(error: BaseException) -> bool:
    return isinstance(error, OperationalError) and "database is locked" in str(error)


class UnversionedSchema(RuntimeError):
    """The database has tables of the component that no migration of it recorded."""


@dataclass(frozen=True)
class Migrations:
    """One component's migrations and how they meet its database."""

    component: str
    """Names the tables in messages ("events", "gateway")."""
    revisions: str
    """The folder of revision files, as ``package:folder`` (``"gateway:migrations"``)."""
    version_table: str
    lock_key: int
    """PostgreSQL advisory lock key, one per component."""
    metadata: MetaData
    """The tables the component declares; any of them without the version table are
    unversioned."""
    adopt_at: str | None = None
    """The revision whose tables a database made by `create_all` is stamped at, if any."""

    async def upgrade(self, engine: AsyncEngine, revision: str = "head") -> None:
        """Bring the component's tables to `revision` in one transaction (idempotent)."""

        def upgrade(sync: Connection) -> None:
            self._lock(sync)
            tables = set(inspect(sync).get_table_names())
            if self.version_table not in tables and tables & set(self.metadata.tables):
                self._version_existing_tables(sync, engine)
            command.upgrade(self._config(sync), revision)

        running = _RUNNING.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        # A new SQLite file is switched to WAL as a connection opens, which needs the lock
        # another replica's migration may hold, and SQLite refuses that switch at once
        # rather than wait for it (waiting could deadlock): so the run is tried again.
        retrying = AsyncRetrying(
            retry=retry_if_exception(_sqlite_locked),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            stop=stop_after_delay(SQLITE_BUSY_TIMEOUT_MS / 1000),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                async with running, engine.begin() as conn:
                    await conn.run_sync(upgrade)

    async def current_revision(self, engine: AsyncEngine) -> str | None:
        def read(sync: Connection) -> str | None:
            context = MigrationContext.configure(sync, opts={"version_table": self.version_table})
            return context.get_current_revision()

        async with engine.connect() as conn:
            return await conn.run_sync(read)

    def _lock(self, sync: Connection) -> None:
        if sync.dialect.name == "postgresql":
            sync.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": self.lock_key})
        elif sync.dialect.name == "sqlite":
            # The driver opens a transaction only before a write, and DDL is not one.
            sync.exec_driver_sql("BEGIN IMMEDIATE")

    def _version_existing_tables(self, sync: Connection, engine: AsyncEngine) -> None:
        where = engine.url.render_as_string()
        if self.adopt_at is None:
            raise UnversionedSchema(
                f"{where}: its {self.component} tables predate migrations (no "
                f"{self.version_table} table); remove that database (the embedded default "
                "is var/shuttle.db) or migrate it by hand"
            )
        expected = self._columns_at(self.adopt_at)
        found = _columns(sync, set(expected) | set(self.metadata.tables))
        if found != expected:
            raise UnversionedSchema(
                f"{where}: its {self.component} tables predate migrations (no "
                f"{self.version_table} table) and are not those of revision {self.adopt_at} "
                f"(differing: {', '.join(_differing(found, expected))}); remove them or "
                "migrate them by hand"
            )
        command.stamp(self._config(sync), self.adopt_at)

    def _columns_at(self, revision: str) -> dict[str, set[str]]:
        """The tables `revision` makes and their columns, read from a scratch database."""
        scratch = create_engine("sqlite://")
        try:
            with scratch.begin() as conn:
                command.upgrade(self._config(conn), revision)
                made = set(inspect(conn).get_table_names()) - {self.version_table}
                return _columns(conn, made)
        finally:
            scratch.dispose()

    def _config(self, connection: Connection) -> Config:
        package, folder = self.revisions.split(":", 1)
        config = Config()
        config.set_main_option("script_location", str(ENVIRONMENT))
        config.set_main_option("path_separator", "os")
        config.set_main_option("version_locations", str(files(package).joinpath(folder)))
        config.attributes["connection"] = connection
        config.attributes["migrations"] = self
        return config


def run_environment() -> None:
    """What Alembic's env.py does: run on the connection `Migrations` passes in."""
    from alembic import context

    connection = context.config.attributes.get("connection")
    migrations = context.config.attributes.get("migrations")
    if not isinstance(connection, Connection) or not isinstance(migrations, Migrations):
        raise SystemExit(
            "Shuttle's migrations run through shuttle.migrations.Migrations: each component "
            "migrates its tables at start-up"
        )
    context.configure(
        connection=connection,
        target_metadata=migrations.metadata,
        version_table=migrations.version_table,
        # SQLite alters tables by copying them; batch mode does that for later migrations.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _columns(sync: Connection, tables: set[str]) -> dict[str, set[str]]:
    inspector = inspect(sync)
    present = set(inspector.get_table_names()) & tables
    return {name: {c["name"] for c in inspector.get_columns(name)} for name in present}


def _differing(found: dict[str, set[str]], expected: dict[str, set[str]]) -> list[str]:
    """Each table missing, extra or with other columns, and how."""
    notes = []
    for name in sorted(set(found) | set(expected)):
        if name not in found:
            notes.append(f"{name} missing")
        elif name not in expected:
            notes.append(f"{name} not in the revision")
        elif found[name] != expected[name]:
            columns = ", ".join(sorted(found[name] ^ expected[name]))
            notes.append(f"{name} columns {columns}")
    return notes
