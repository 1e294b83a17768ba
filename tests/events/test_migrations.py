"""Alembic migrations and retention on SQLite and PostgreSQL; the admin commands as processes."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Table, func, inspect, select
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.hot import MemoryHotTier
from services.events.log import EventLog
from services.events.migrate import VERSION_TABLE, current_revision, migrate
from services.events.models import appends, events, tool_results, workflows
from services.events.retention import RetentionTask, purge
from services.events.store import SqlEventStore
from shuttle.db import create_engine
from shuttle.migrations import UnversionedSchema

from .helpers import new, progress

REPO = Path(__file__).resolve().parents[2]


async def table_names(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))


async def test_migrations_create_the_tables_with_their_own_version_table(
    engine: AsyncEngine,
) -> None:
    assert {"workflows", "events", "appends", "tool_results", VERSION_TABLE} <= await table_names(
        engine
    )
    assert "alembic_version" not in await table_names(engine)  # left to other services
    assert await current_revision(engine) == "0004"
    await migrate(engine)  # a second run (a restart) changes nothing
    assert await current_revision(engine) == "0004"


async def count(engine: AsyncEngine, table: Table, workflow_id: str) -> int:
    async with engine.connect() as conn:
        query = select(func.count()).select_from(table).where(table.c.workflow_id == workflow_id)
        return int((await conn.execute(query)).scalar_one())


async def test_purge_removes_whole_workflows_idle_past_retention(engine: AsyncEngine) -> None:
    now = datetime(2026, 6, 1, tzinfo=UTC)
    old_clock = SqlEventStore(engine, clock=lambda: now - timedelta(days=91))
    recent_clock = SqlEventStore(engine, clock=lambda: now - timedelta(days=89))
    for store, workflow_id in ((old_clock, "wf-old"), (recent_clock, "wf-new")):
        log = EventLog(store, MemoryHotTier())
        await log.create_workflow(tenant_id="t1", workflow_id=workflow_id)
        await log.append(
            workflow_id,
            "t1",
            [*progress(2), new("TOOL_OBSERVATION", {"tool_name": "t", "result": "z" * 2500})],
            producer_id="p",
            batch_seq=1,
        )
    purger = SqlEventStore(engine)
    task = RetentionTask(purger, retention_days=90, interval_seconds=3600, clock=lambda: now)
    report = await task.run_once()
    assert (report.workflows, report.events) == (1, 3)
    for table in (events, appends, tool_results):
        assert await count(engine, table, "wf-old") == 0
        assert await count(engine, table, "wf-new") > 0
    async with engine.connect() as conn:
        left = (await conn.execute(select(workflows.c.id))).scalars().all()
    assert left == ["wf-new"]
    assert (await purge(purger, now - timedelta(days=90))).workflows == 0
    await purger.close()


async def run_admin(env: dict[str, str], *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.events.admin",
        *args,
        cwd=REPO,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    return process.returncode or 0, output.decode()


@pytest.mark.integration
async def test_admin_migrate_and_purge_commands(tmp_path: Path) -> None:
    env = {"SHUTTLE_DATA_DIR": str(tmp_path / "var"), "SHUTTLE_DATABASE_URL": ""}
    code, output = await run_admin(env, "migrate")
    assert code == 0, output
    assert "revision 0004" in output
    assert (tmp_path / "var" / "shuttle.db").is_file()
    code, output = await run_admin(env, "purge", "--days", "30")
    assert code == 0, output
    assert "purged 0 workflows" in output
    code, output = await run_admin({**env, "SHUTTLE_EVENTS_RETENTION_DAYS": "-1"}, "purge")
    assert code == 2
    assert "SHUTTLE_EVENTS_RETENTION_DAYS" in output


async def test_tables_that_predate_migrations_are_reported_clearly(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'old.db'}")
    try:
        async with engine.begin() as conn:
            await conn.run_sync(lambda sync: workflows.create(sync))
        with pytest.raises(UnversionedSchema, match="predate migrations"):
            await migrate(engine)
    finally:
        await engine.dispose()


async def test_revision_0002_indexes_lease_expiry_and_clears_it_on_ended_workflows(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'upgrade.db'}")
    try:
        await migrate(engine, "0001")
        then = datetime(2026, 6, 1, tzinfo=UTC)
        rows = [("wf-done", "COMPLETED"), ("wf-running", "RUNNING")]
        async with engine.begin() as conn:
            for workflow_id, status in rows:
                await conn.execute(
                    workflows.insert().values(
                        id=workflow_id,
                        tenant_id="t1",
                        status=status,
                        lease_owner="exec-a",
                        lease_expires_at=then,
                        created_at=then,
                        updated_at=then,
                    )
                )
        await migrate(engine)
        async with engine.connect() as conn:
            expiry = dict(
                (await conn.execute(select(workflows.c.id, workflows.c.lease_expires_at))).all()
            )
            indexes = await conn.run_sync(lambda sync: inspect(sync).get_indexes("workflows"))
        assert expiry == {"wf-done": None, "wf-running": then}
        assert "ix_workflows_lease_expires_at" in {index["name"] for index in indexes}
    finally:
        await engine.dispose()


async def test_revision_0003_indexes_workflows_by_tenant_and_status(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        indexes = await conn.run_sync(lambda sync: inspect(sync).get_indexes("workflows"))
    columns = {index["name"]: index["column_names"] for index in indexes}
    assert columns["ix_workflows_tenant_status"] == ["tenant_id", "status"]


async def test_revision_0004_gives_existing_workflows_no_epoch_no_takeovers_no_spec(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'upgrade.db'}")
    try:
        await migrate(engine, "0003")
        then = datetime(2026, 6, 1, tzinfo=UTC)
        async with engine.begin() as conn:
            await conn.execute(
                workflows.insert().values(
                    id="wf-old",
                    tenant_id="t1",
                    status="RUNNING",
                    lease_owner="exec-a",
                    lease_expires_at=then,
                    created_at=then,
                    updated_at=then,
                )
            )
        await migrate(engine)
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    select(workflows.c.lease_epoch, workflows.c.takeovers, workflows.c.spec)
                )
            ).one()
        assert tuple(row) == (0, 0, "")
        assert await current_revision(engine) == "0004"
    finally:
        await engine.dispose()
