"""Two tools servers on one PostgreSQL ledger, as replicas behind one address: a repeat
reaching the other replica waits for the first to finish, and a row left running by a
replica that is gone is taken over by exactly one of them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.tools.grpc_api import request_from_proto
from services.tools.ledger import CallLedger, Fingerprint
from shuttle.sql_transactions import EngineWrites
from tests.support.databases import EngineMaker, postgres_url, schema_engines  # noqa: F401
from tests.tools.ledger_support import (
    Held,
    Replica,
    append,
    ledger_entry,
    ledger_server,
    logged_lines,
    reading,
    registry_with,
    request,
    stub_for,
)

NOTE = {"note": "held call"}


@pytest.fixture
async def engines(postgres_url: str) -> AsyncIterator[EngineMaker]:  # noqa: F811
    async with schema_engines(postgres_url, migrated=False) as make:
        yield make


@pytest.fixture
async def replicas(
    engines: EngineMaker, tmp_path: Path
) -> AsyncIterator[tuple[Held, list[Replica]]]:
    """Two replicas sharing the database, the workspaces and one held tool."""
    held = Held()
    async with (
        ledger_server(engines(), registry_with(tmp_path / "ws", held), "replica-a") as a,
        ledger_server(engines(), registry_with(tmp_path / "ws", held), "replica-b") as b,
    ):
        yield held, [a, b]


async def test_a_repeat_on_another_replica_waits_for_the_first(
    replicas: tuple[Held, list[Replica]], engines: EngineMaker
) -> None:
    held, (a, b) = replicas
    first_channel = a.channel()
    first = asyncio.ensure_future(stub_for(first_channel).Execute(request("held", NOTE)))
    await held.started.wait()
    await first_channel.close()  # the executor that sent it died; its successor asks b
    async with b.channel() as channel:
        repeat = asyncio.ensure_future(stub_for(channel).Execute(request("held", NOTE)))
        await asyncio.sleep(0.3)  # b polls the row, which is still running
        assert not repeat.done()
        held.release.set()
        outcome = await repeat
    assert outcome.observation == "held call: run #1"
    assert held.runs == 1
    entry = await ledger_entry(reading(engines()))
    assert entry is not None and (entry.state, entry.replica) == ("done", "replica-a")
    assert first.done()


async def test_a_stale_row_is_taken_over_by_one_replica(
    replicas: tuple[Held, list[Replica]], engines: EngineMaker, tmp_path: Path
) -> None:
    _, (a, b) = replicas
    call = append("one")
    # A replica killed mid-call an hour ago left its row running.
    ledger = CallLedger(engines(), EngineWrites(engines()))
    recorded = request_from_proto(call)
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    await ledger.start(recorded, Fingerprint.of(recorded), "gone", hour_ago)
    async with a.channel() as to_a, b.channel() as to_b:
        stubs = [stub_for(to_a), stub_for(to_b)]
        replies = await asyncio.gather(*(stubs[n % 2].Execute(call) for n in range(6)))
    assert all(reply == replies[0] for reply in replies) and not replies[0].error
    assert logged_lines(tmp_path / "ws") == ["one"]
    entry = await ledger_entry(reading(engines()))
    assert entry is not None and (entry.state, entry.attempt) == ("done", 2)
    assert entry.replica in {a.recorded.replica, b.recorded.replica}


async def test_a_row_still_within_its_time_is_not_taken_over(
    replicas: tuple[Held, list[Replica]], engines: EngineMaker, tmp_path: Path
) -> None:
    _, (a, _) = replicas
    call = append("one")
    ledger = CallLedger(engines(), EngineWrites(engines()))
    recorded = request_from_proto(call)
    await ledger.start(recorded, Fingerprint.of(recorded), "elsewhere", datetime.now(UTC))
    async with a.channel() as channel:
        waiting = asyncio.ensure_future(stub_for(channel).Execute(call))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # the other replica may still be running it
        waiting.cancel()
    assert logged_lines(tmp_path / "ws") == []
    entry = await ledger_entry(reading(engines()))
    assert entry is not None and (entry.state, entry.replica) == ("running", "elsewhere")
