"""Every component's migrations on SQLite and PostgreSQL: the tables they make are those
`create_all` makes from the component's metadata, replicas may migrate at once, and tables
`create_all` made are adopted where the component says so."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Table, func, inspect, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.stores.db import MIGRATIONS as GATEWAY
from gateway.stores.db import sessions
from services.events.migrate import MIGRATIONS as EVENTS
from services.tools.db import MIGRATIONS as TOOLS
from services.tools.db import tool_approvals
from shuttle.db import create_engine
from shuttle.migrations import Migrations, UnversionedSchema
from tests.support.databases import EngineMaker, postgres_url, schema_engines  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
HEADS = {EVENTS: "0004", GATEWAY: "0002", TOOLS: "0002"}
ADOPTING = [GATEWAY, TOOLS]
NOW = datetime(2026, 6, 1, tzinfo=UTC)
# A row of each adopting component's, to see it survive the adoption.
ROWS: dict[Migrations, tuple[Table, dict[str, Any]]] = {
    GATEWAY: (
        sessions,
        {"tenant_id": "t1", "session_id": "s1", "created_at": NOW, "updated_at": NOW},
    ),
    TOOLS: (
        tool_approvals,
        {
            "id": "ap-1",
            "tenant_id": "t1",
            "workflow_id": "wf-1",
            "call_id": "c-1",
            "tool_name": "shell",
            "arguments_json": "{}",
            "operation": "write",
            "risk_level": "high",
            "status": "pending",
            "decided_by": "",
            "comment": "",
            "requested_at": NOW,
            "expires_at": NOW,
        },
    ),
}

Opener = Callable[[str], AbstractAsyncContextManager[EngineMaker]]


def named(migrations: Migrations) -> str:
    return migrations.component


@pytest.fixture(params=["sqlite", "postgresql"])
def open_blank(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens empty databases, each by a name: a SQLite file, or a PostgreSQL schema."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else ""

    @asynccontextmanager
    async def open_one(name: str) -> AsyncIterator[EngineMaker]:
        if url:
            async with schema_engines(url, migrated=False) as make:
                yield make
            return
        made: list[AsyncEngine] = []

        def make_sqlite() -> AsyncEngine:
            made.append(create_engine(f"sqlite+aiosqlite:///{tmp_path / name}.db"))
            return made[-1]

        try:
            yield make_sqlite
        finally:
            for engine in made:
                await engine.dispose()

    return open_one


async def described(engine: AsyncEngine, migrations: Migrations) -> dict[str, Any]:
    """The component's tables as the database reports them: columns, keys, indexes."""

    def describe(sync: Connection) -> dict[str, Any]:
        inspector = inspect(sync)
        return {
            name: {
                "columns": [
                    (
                        column["name"],
                        column["type"].compile(dialect=sync.dialect),
                        column["nullable"],
                        column.get("default"),
                        column.get("autoincrement"),
                    )
                    for column in inspector.get_columns(name)
                ],
                "primary_key": inspector.get_pk_constraint(name),
                "foreign_keys": sorted(map(str, inspector.get_foreign_keys(name))),
                "indexes": sorted(
                    (index["name"] or "", tuple(index["column_names"]), index["unique"])
                    for index in inspector.get_indexes(name)
                ),
                "unique": sorted(
                    (unique["name"] or "", tuple(unique["column_names"]))
                    for unique in inspector.get_unique_constraints(name)
                ),
            }
            for name in sorted(migrations.metadata.tables)
            if inspector.has_table(name)
        }

    async with engine.connect() as conn:
        return await conn.run_sync(describe)


# The tables `create_all` made of each adopting component's metadata before migrations,
# which its `adopt_at` revision makes: tables added since came with their own revisions.
BEFORE_MIGRATIONS = {GATEWAY: None, TOOLS: {"tool_audit", "tool_approvals"}}
# Columns later revisions added to tables that existed before migrations.
ADDED_SINCE = {GATEWAY: {"gateway_tasks": ("client_message_id",)}, TOOLS: {}}


async def create_all(
    engine: AsyncEngine, migrations: Migrations, before_migrations: bool = False
) -> None:
    names = BEFORE_MIGRATIONS[migrations] if before_migrations else None
    tables = [t for t in migrations.metadata.sorted_tables if names is None or t.name in names]
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: migrations.metadata.create_all(sync, tables=tables))
        if before_migrations:
            for table, columns in ADDED_SINCE[migrations].items():
                for column in columns:
                    await conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))


async def table_names(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))


@pytest.mark.parametrize("migrations", list(HEADS), ids=named)
async def test_migrations_make_the_tables_create_all_makes(
    migrations: Migrations, open_blank: Opener
) -> None:
    async with open_blank("migrated") as migrated_db, open_blank("created") as created_db:
        migrated, created = migrated_db(), created_db()
        await migrations.upgrade(migrated)
        await create_all(created, migrations)
        made = await described(migrated, migrations)
        assert set(made) == set(migrations.metadata.tables)
        assert made == await described(created, migrations)
        assert await migrations.current_revision(migrated) == HEADS[migrations]
        assert migrations.version_table in await table_names(migrated)


@pytest.mark.parametrize("migrations", ADOPTING, ids=named)
async def test_a_second_run_changes_nothing(migrations: Migrations, open_blank: Opener) -> None:
    async with open_blank("twice") as database:
        engine = database()
        await migrations.upgrade(engine)
        first = await described(engine, migrations)
        await migrations.upgrade(engine)  # a restart
        assert await described(engine, migrations) == first
        assert await migrations.current_revision(engine) == HEADS[migrations]


# One replica's start-up: its component's migrations on the database of argv, in a process
# of its own (in one process, migrations take turns before they reach the database). It
# migrates on a line of input, so that replicas loaded one after another migrate at once.
REPLICA = """
import asyncio, importlib, sys
from shuttle.db import create_engine
module, url, schema = sys.argv[1:]
migrations = importlib.import_module(module).MIGRATIONS
path = {"server_settings": {"search_path": schema}} if schema else {}
engine = create_engine(url, connect_args=path)
print("ready", flush=True)
sys.stdin.readline()
asyncio.run(migrations.upgrade(engine))
"""
MODULES = {GATEWAY: "gateway.stores.db", TOOLS: "services.tools.db"}


async def start_replica(migrations: Migrations, engine: AsyncEngine) -> asyncio.subprocess.Process:
    url = engine.url.render_as_string(hide_password=False)
    schema = ""
    if engine.dialect.name == "postgresql":
        async with engine.connect() as conn:
            schema = str(await conn.scalar(text("SELECT current_schema()")))
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        REPLICA,
        MODULES[migrations],
        url,
        schema,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


@pytest.mark.parametrize("migrations", ADOPTING, ids=named)
async def test_replicas_migrating_at_once_all_succeed(
    migrations: Migrations, open_blank: Opener
) -> None:
    async with open_blank("replicas") as database:
        engine = database()
        replicas = [await start_replica(migrations, engine) for _ in range(2)]
        for replica in replicas:
            assert replica.stdout is not None
            assert await replica.stdout.readline() == b"ready\n"
        outcomes = await asyncio.gather(*(replica.communicate(b"go\n") for replica in replicas))
        for replica, (output, _) in zip(replicas, outcomes, strict=True):
            assert replica.returncode == 0, output.decode()
        assert await migrations.current_revision(engine) == HEADS[migrations]
        assert set(await described(engine, migrations)) == set(migrations.metadata.tables)


@pytest.mark.parametrize("migrations", ADOPTING, ids=named)
async def test_tables_create_all_made_are_adopted_with_their_rows(
    migrations: Migrations, open_blank: Opener
) -> None:
    table, row = ROWS[migrations]
    async with open_blank("adopted") as database:
        engine = database()
        await create_all(engine, migrations, before_migrations=True)
        async with engine.begin() as conn:
            await conn.execute(table.insert().values(**row))
        await migrations.upgrade(engine)
        assert await migrations.current_revision(engine) == HEADS[migrations]
        async with engine.connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(table))).scalar() == 1


@pytest.mark.parametrize("migrations", ADOPTING, ids=named)
async def test_tables_of_another_shape_are_refused(
    migrations: Migrations, open_blank: Opener
) -> None:
    table, _ = ROWS[migrations]
    async with open_blank("partial") as database:
        engine = database()
        async with engine.begin() as conn:
            await conn.run_sync(lambda sync: table.create(sync))
        with pytest.raises(UnversionedSchema, match="not those of revision 0001") as refused:
            await migrations.upgrade(engine)
        assert "missing" in str(refused.value)
        assert await table_names(engine) == {table.name}  # nothing stamped, nothing made


async def test_components_sharing_a_process_and_a_database_migrate_at_once(
    open_blank: Opener,
) -> None:
    async with open_blank("shared") as database:
        engines = {migrations: database() for migrations in HEADS}
        await asyncio.gather(*(migrations.upgrade(e) for migrations, e in engines.items()))
        for migrations, engine in engines.items():
            assert await migrations.current_revision(engine) == HEADS[migrations]


async def test_a_new_sqlite_file_another_process_is_writing_is_migrated_once_it_is_free(
    tmp_path: Path,
) -> None:
    # The other process holds the write lock of a file still in its rollback journal, which
    # SQLite refuses to switch to WAL at once rather than wait for.
    path = tmp_path / "shared.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    released = threading.Timer(0.5, holder.execute, ("COMMIT",))
    released.start()
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        await TOOLS.upgrade(engine)
        assert await TOOLS.current_revision(engine) == HEADS[TOOLS]
    finally:
        await engine.dispose()
        released.join()
        holder.close()
