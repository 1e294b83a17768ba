"""Replicas of every component starting at once on a new PostgreSQL database: each
component's advisory lock lets one migrate while the others wait and then find its
tables at head, so every start succeeds and each table is made once."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.stores.db import MIGRATIONS as GATEWAY
from services.events.migrate import MIGRATIONS as EVENTS
from services.tools.db import MIGRATIONS as TOOLS
from shuttle.db import create_engine
from shuttle.migrations import Migrations
from tests.support.databases import PG_HOST, PG_PORT, PG_USER, admin_sql, postgres_url  # noqa: F401

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REPLICAS_EACH = 4
COMPONENTS = {
    "services.events.migrate": (EVENTS, "0003"),
    "gateway.stores.db": (GATEWAY, "0001"),
    "services.tools.db": (TOOLS, "0002"),
}
# One replica's start-up: its component's migrations, once every replica is loaded.
REPLICA = """
import asyncio, importlib, sys
from shuttle.db import create_engine
module, url = sys.argv[1:]
migrations = importlib.import_module(module).MIGRATIONS
print("ready", flush=True)
sys.stdin.readline()
asyncio.run(migrations.upgrade(create_engine(url)))
"""


@pytest.fixture
def fresh_database(postgres_url: str) -> Iterator[str]:  # noqa: F811 - needs the server
    name = f"shuttle_migrate_{uuid.uuid4().hex[:12]}"
    admin_sql(f'CREATE DATABASE "{name}"')
    yield f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_every_components_replicas_migrate_a_new_database_at_once(
    fresh_database: str,
) -> None:
    replicas = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", REPLICA, module, fresh_database, cwd=ROOT,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        for module in COMPONENTS
        for _ in range(REPLICAS_EACH)
    ]  # fmt: skip
    for replica in replicas:
        assert replica.stdout is not None
        assert await replica.stdout.readline() == b"ready\n"
    outcomes = await asyncio.gather(*(replica.communicate(b"go\n") for replica in replicas))
    for replica, (output, _) in zip(replicas, outcomes, strict=True):
        assert replica.returncode == 0, output.decode()

    engine = create_engine(fresh_database)
    try:
        async with engine.connect() as conn:
            tables = list(
                await conn.scalars(
                    text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
                )
            )
        expected: set[str] = set()
        for migrations, head in COMPONENTS.values():
            assert await migrations.current_revision(engine) == head
            expected |= set(migrations.metadata.tables) | {migrations.version_table}
        assert sorted(tables) == sorted(expected)  # each once, and nothing else
        for migrations in (m for m, _ in COMPONENTS.values()):
            assert await versions(engine, migrations) == 1
    finally:
        await engine.dispose()


async def versions(engine: AsyncEngine, migrations: Migrations) -> int:
    """Rows in the component's version table: one, however many replicas migrated."""
    async with engine.connect() as conn:
        count = await conn.scalar(text(f"SELECT count(*) FROM {migrations.version_table}"))
    return int(count or 0)
