"""The call ledger in the tools service as `python -m services.tools` builds it (its SQLite
file): a repeat is answered from the record, a different repeat is refused, the record
outlives a restart, and it goes with its workflow or past the retention."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest
from sqlalchemy import select

from services.tools.__main__ import build
from services.tools.db import tool_ledger
from services.tools.ledger import LedgerRetention, arguments_hash
from services.tools.ledger_storage import LEDGER_PAGE_BYTES, ledger_url
from shuttle.db import create_engine, sqlite_path
from shuttle.settings import Settings
from shuttle.v1 import tools_pb2
from tests.tools.ledger_support import (
    TENANT,
    WORKFLOW,
    append,
    ledger_entry,
    logged_lines,
    reading,
    request,
    stub_for,
)

if TYPE_CHECKING:
    from shuttle.v1.tools_pb2_grpc import ToolServiceAsyncStub


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path, database_url="")


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[ToolServiceAsyncStub]:
    service = await build(settings)
    port = await service.start("127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield stub_for(channel)
    finally:
        await channel.close()
        await service.stop(grace=0)


@pytest.fixture
async def stub(settings: Settings) -> AsyncIterator[ToolServiceAsyncStub]:
    async with serving(settings) as served:
        yield served


async def refused(stub: ToolServiceAsyncStub, call: tools_pb2.ExecuteRequest) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Execute(call)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return caught.value.details() or ""


async def test_a_repeat_gets_the_recorded_outcome_and_the_tool_runs_once(
    stub: ToolServiceAsyncStub, settings: Settings
) -> None:
    first = await stub.Execute(append("one"))
    assert first.error == "" and first.call_id == "c1", first.observation
    again = await stub.Execute(append("one"))
    assert again == first
    assert logged_lines(settings.workspace_root) == ["one"]
    # The same arguments spelled otherwise (key order, spaces) are the same call.
    respelled = append("one")
    respelled.arguments_json = '{"content": "one\\n",  "path": "calls.log", "operation": "append"}'
    assert await stub.Execute(respelled) == first
    # A new call id is a new call.
    await stub.Execute(append("two", call_id="c2"))
    assert logged_lines(settings.workspace_root) == ["one", "two"]

    engine = create_engine(ledger_url(settings.sqlalchemy_url))
    try:
        entry = await ledger_entry(reading(engine))
    finally:
        await engine.dispose()
    assert entry is not None and entry.state == "done" and entry.attempt == 1
    assert entry.fingerprint.tool_name == "file_ops"
    assert entry.outcome is not None and entry.outcome.observation == first.observation


async def test_failed_and_blocked_outcomes_are_recorded_too(stub: ToolServiceAsyncStub) -> None:
    unknown = await stub.Execute(request("no_such_tool", {}, "c-unknown"))
    assert unknown.error.startswith("unknown tool")
    assert await stub.Execute(request("no_such_tool", {}, "c-unknown")) == unknown
    bad = await stub.Execute(request("calculator", {"expression": "1/0"}, "c-bad"))
    assert bad.error
    assert await stub.Execute(request("calculator", {"expression": "1/0"}, "c-bad")) == bad


async def test_a_different_repeat_is_refused_and_the_service_stays_up(
    stub: ToolServiceAsyncStub, settings: Settings
) -> None:
    first = await stub.Execute(append("one"))
    other_arguments = await refused(stub, append("other"))
    assert "'c1'" in other_arguments and "other arguments" in other_arguments
    other_tool = await refused(stub, request("calculator", {"expression": "1+1"}))
    assert "'c1'" in other_tool and "'file_ops', not 'calculator'" in other_tool
    other_tenant = await refused(stub, append("one", tenant="intruder"))
    assert "'c1'" in other_tenant and "file_ops" not in other_tenant  # nothing of the call
    assert await stub.Execute(append("one")) == first
    added = await stub.Execute(request("calculator", {"expression": "1+1"}, "c2"))
    assert added.observation == "2"
    assert logged_lines(settings.workspace_root) == ["one"]


async def test_ids_longer_than_the_ledger_holds_are_invalid(stub: ToolServiceAsyncStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Execute(append("one", call_id="c" * 129))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "call_id is longer than 128 characters" in (caught.value.details() or "")


async def test_calls_outside_a_workflow_are_not_recorded(
    stub: ToolServiceAsyncStub, settings: Settings
) -> None:
    for _ in range(2):
        await stub.Execute(append("adhoc", call_id=""))
    assert logged_lines(settings.workspace_root) == ["adhoc", "adhoc"]


async def test_the_record_outlives_a_restart(settings: Settings) -> None:
    async with serving(settings) as stub:
        first = await stub.Execute(append("one"))
    async with serving(settings) as stub:
        assert await stub.Execute(append("one")) == first
        assert "other arguments" in await refused(stub, append("two"))
    assert logged_lines(settings.workspace_root) == ["one"]


async def test_a_row_its_replica_left_running_is_taken_over(settings: Settings) -> None:
    async with serving(settings) as stub:
        await stub.Execute(request("calculator", {"expression": "1"}, "warm-up"))
        # What a replica killed mid-call leaves: a running row, long past its time.
        engine = create_engine(ledger_url(settings.sqlalchemy_url))
        try:
            started = datetime.now(UTC) - timedelta(hours=1)
            hashed = arguments_hash(append("one").arguments_json)
            async with engine.begin() as conn:
                await conn.execute(
                    tool_ledger.update()
                    .where(tool_ledger.c.call_id == "warm-up")
                    .values(call_id="c1", tool_name="file_ops", replica="gone", state="running")
                    .values(started_at=started, arguments_hash=hashed)
                )
            reply = await stub.Execute(append("one"))
            assert reply.error == "", reply.observation
            assert await stub.Execute(append("one")) == reply
            entry = await ledger_entry(reading(engine))
        finally:
            await engine.dispose()
    assert entry is not None and (entry.state, entry.attempt) == ("done", 2)
    assert entry.replica != "gone"
    assert logged_lines(settings.workspace_root) == ["one"]


async def test_forgetting_a_workflow_deletes_its_record(
    stub: ToolServiceAsyncStub, settings: Settings
) -> None:
    await stub.Execute(append("one"))
    await stub.Execute(append("one", tenant="other", workflow_id="wf-other"))
    forgotten = await stub.DeleteWorkflowData(
        tools_pb2.DeleteWorkflowDataRequest(tenant_id=TENANT, workflow_ids=[WORKFLOW, "wf-other"])
    )
    assert forgotten.records_deleted >= 1
    engine = create_engine(ledger_url(settings.sqlalchemy_url))
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(tool_ledger.c.tenant_id))).all()
    finally:
        await engine.dispose()
    assert [row.tenant_id for row in rows] == ["other"]
    # Forgotten: the same call id is a new call again.
    await stub.Execute(append("again"))
    assert logged_lines(settings.workspace_root) == ["again"]


async def test_rows_past_the_retention_are_purged(
    stub: ToolServiceAsyncStub, settings: Settings
) -> None:
    await stub.Execute(append("one"))
    engine = create_engine(ledger_url(settings.sqlalchemy_url))
    ledger = reading(engine)
    try:
        now = datetime.now(UTC)
        kept = LedgerRetention(ledger, retention_hours=1, clock=lambda: now)
        assert await kept.run_once() == 0
        later = LedgerRetention(ledger, retention_hours=1, clock=lambda: now + timedelta(hours=2))
        assert await later.run_once() == 1
        assert await ledger_entry(ledger) is None
    finally:
        await engine.dispose()


def test_a_sqlite_databases_ledger_is_a_file_beside_it() -> None:
    assert ledger_url("sqlite+aiosqlite:////srv/var/shuttle.db") == (
        "sqlite+aiosqlite:////srv/var/shuttle-tool-ledger.db"
    )
    assert (
        ledger_url("sqlite+aiosqlite:///var/data") == "sqlite+aiosqlite:///var/data-tool-ledger.db"
    )
    for shared in ("sqlite+aiosqlite://", "postgresql+asyncpg://u@db:5432/shuttle"):
        assert ledger_url(shared) == shared


def page_size(database_url: str) -> int:
    path = sqlite_path(database_url)
    assert path is not None
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


async def test_the_ledger_file_is_made_with_small_pages_and_keeps_them(
    settings: Settings,
) -> None:
    async with serving(settings) as stub:
        await stub.Execute(append("one"))
    ledger = ledger_url(settings.sqlalchemy_url)
    assert page_size(ledger) == LEDGER_PAGE_BYTES < page_size(settings.sqlalchemy_url)
    async with serving(settings) as stub:  # reopened: the file and its record as they were
        assert (await stub.Execute(append("one"))).error == ""
    assert page_size(ledger) == LEDGER_PAGE_BYTES
    assert logged_lines(settings.workspace_root) == ["one"]
