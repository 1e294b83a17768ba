"""Repeats of a call still running on the same tools server: they wait for it; a caller
that goes away leaves it running and its outcome recorded; a ledger it cannot write keeps
the call from running; a SQLite file another writer holds only delays the record."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from services.tools.db import create_schema
from services.tools.ledger import CallLedger, Fingerprint
from services.tools.ledger_storage import InPlaceStatements, ledger_url
from shuttle.db import create_engine
from shuttle.sql_transactions import engine_url, writes_for
from shuttle.tool_calls import ToolCall, ToolOutcome
from tests.tools.ledger_support import (
    WORKFLOW,
    Held,
    append,
    ledger_entry,
    ledger_server,
    logged_lines,
    registry_with,
    request,
    stub_for,
)

NOTE = {"note": "held call"}


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'tools.db'}")
    yield engine
    await engine.dispose()


async def test_concurrent_repeats_wait_for_the_first_and_get_its_outcome(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    held = Held()
    async with (
        ledger_server(engine, registry_with(tmp_path / "ws", held)) as replica,
        replica.channel() as channel,
    ):
        stub = stub_for(channel)
        first = asyncio.ensure_future(stub.Execute(request("held", NOTE)))
        await held.started.wait()
        repeats = [asyncio.ensure_future(stub.Execute(request("held", NOTE))) for _ in range(3)]
        await asyncio.sleep(0.3)  # the repeats reach the server, which must hold them
        assert not any(repeat.done() for repeat in repeats)
        held.release.set()
        outcome = await first
        assert outcome.observation == "held call: run #1"
        assert [await repeat for repeat in repeats] == [outcome] * 3
    assert held.runs == 1


async def test_a_repeat_with_other_arguments_while_running_is_refused(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    held = Held()
    async with (
        ledger_server(engine, registry_with(tmp_path / "ws", held)) as replica,
        replica.channel() as channel,
    ):
        stub = stub_for(channel)
        first = asyncio.ensure_future(stub.Execute(request("held", NOTE)))
        await held.started.wait()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Execute(request("held", {"note": "another"}))
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "'c1'" in (caught.value.details() or "")
        held.release.set()
        assert (await first).observation == "held call: run #1"


async def test_a_caller_going_away_does_not_stop_the_call(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    held = Held()
    async with ledger_server(engine, registry_with(tmp_path / "ws", held)) as replica:
        channel = replica.channel()
        pending = asyncio.ensure_future(stub_for(channel).Execute(request("held", NOTE)))
        await held.started.wait()
        await channel.close()  # the executor died mid-call
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            await pending
        await asyncio.sleep(0.3)  # the server cancels the RPC: the call must go on
        held.release.set()
        async with replica.channel() as again:
            reply = await stub_for(again).Execute(request("held", NOTE))
        assert reply.observation == "held call: run #1"
        entry = await ledger_entry(replica.ledger)
    assert entry is not None and entry.state == "done"
    assert held.runs == 1


async def test_a_ledger_that_cannot_be_written_keeps_the_call_from_running(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    async with (
        ledger_server(engine, registry_with(tmp_path / "ws")) as replica,
        replica.channel() as channel,
    ):
        ledger_engine = create_engine(ledger_url(engine_url(engine)))
        async with ledger_engine.begin() as conn:
            await conn.execute(text("DROP TABLE tool_ledger"))
        await ledger_engine.dispose()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub_for(channel).Execute(append("one"))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "'file_ops' was not run" in (caught.value.details() or "")
    assert logged_lines(tmp_path / "ws") == []


async def test_a_file_another_writer_holds_sends_the_record_to_the_writer_thread(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    async with (
        ledger_server(engine, registry_with(tmp_path / "ws")) as replica,
        replica.channel() as channel,
    ):
        # Another writer's transaction (another replica's, the purge). Recorded in place
        # with a busy wait, the call would block the event loop, and this test, for good.
        holder = sqlite3.connect(tmp_path / "tools-tool-ledger.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            pending = asyncio.ensure_future(stub_for(channel).Execute(append("one")))
            await asyncio.sleep(0.3)
            assert not pending.done()  # waiting its turn on the writer thread, not failing
        finally:
            holder.execute("COMMIT")
            holder.close()
        reply = await pending
        assert reply.error == "", reply.observation
        entry = await ledger_entry(replica.ledger)
    assert entry is not None and entry.state == "done"
    assert logged_lines(tmp_path / "ws") == ["one"]


async def test_in_place_statements_checkpoint_the_log_on_a_worker_thread(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    engine = create_engine(url)
    await create_schema(engine)
    writes = writes_for(engine)
    in_place = InPlaceStatements(url, writes, checkpoint_every=3)
    ledger = CallLedger(engine, writes, in_place)
    # Open (and reading) throughout, so no connection's closing checkpoints the log.
    reader = sqlite3.connect(tmp_path / "ledger.db")
    reader.execute("SELECT count(*) FROM tool_ledger").fetchone()
    try:
        for n in range(10):
            call = ToolCall(tool_name="calculator", workflow_id=WORKFLOW, call_id=f"cp-{n}")
            await ledger.start(call, Fingerprint.of(call), "replica", datetime.now(UTC))
        await in_place.close()  # waits for the checkpoint under way
        # Checkpointed: the rows are in the file itself, not only in its log.
        assert b"cp-8" in (tmp_path / "ledger.db").read_bytes()
    finally:
        reader.close()
        await writes.close()
        await engine.dispose()


async def test_statements_written_in_place_read_back_as_the_engine_wrote_them(
    tmp_path: Path,
) -> None:
    # In place, statements skip Core's execution: the columns' own conversions must still
    # apply (a UTC datetime as SQLite text, NUL and lone surrogates made storable).
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    engine = create_engine(url)
    await create_schema(engine)
    writes = writes_for(engine)
    in_place = InPlaceStatements(url, writes)
    ledger = CallLedger(engine, writes, in_place)
    started = datetime(2026, 12, 5, 1, 2, 3, 456789, tzinfo=UTC)
    call = ToolCall(tool_name="calc\x00ulator", workflow_id=WORKFLOW, call_id="rt-1")
    try:
        await ledger.start(call, Fingerprint.of(call), "replica", started)
        outcome = ToolOutcome(observation="a\x00b \ud800", blocked=True, truncated=True)
        await ledger.finish(call, outcome, started)
        with pytest.raises(IntegrityError):  # the id is known: a repeat
            await ledger.start(call, Fingerprint.of(call), "replica", started)
        entry = await ledger.get(call)
    finally:
        await in_place.close()
        await writes.close()
        await engine.dispose()
    assert entry is not None and entry.outcome is not None
    assert entry.started_at == started
    assert entry.fingerprint == Fingerprint.of(call)
    assert entry.outcome.observation == "a\ufffdb \ufffd"
    assert entry.outcome.blocked and entry.outcome.truncated
