"""Fixtures: a real SQLite file per test, the domain EventLog, and the real gRPC server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.__main__ import build
from services.events.hot import MemoryHotTier
from services.events.leases import LeaseStore
from services.events.log import EventLog
from services.events.migrate import migrate
from services.events.redis_hot import RedisHotTier
from services.events.store import SqlEventStore
from services.events.sweeper import LeaseSweeper
from shuttle.db import create_engine
from shuttle.grpc_server import GrpcService
from shuttle.settings import Settings
from shuttle.v1 import events_pb2_grpc
from tests.events.helpers import TierMaker
from tests.support.databases import (  # noqa: F401 - fixtures
    EngineMaker,
    postgres_url,
    private_redis,
    redis_prefix,
    redis_server,
    schema_engines,
)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'events.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
async def engines(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[EngineMaker]:
    """Makes engines on one migrated database: a SQLite file, then a fresh PostgreSQL schema.
    Each engine stands for one replica of the service."""
    if request.param == "postgresql":
        async with schema_engines(request.getfixturevalue("postgres_url")) as make:
            yield make
        return
    made: list[AsyncEngine] = []

    def make_sqlite() -> AsyncEngine:
        made.append(create_engine(database_url))
        return made[-1]

    await migrate(make_sqlite())
    yield make_sqlite
    for engine in made:
        await engine.dispose()


@pytest.fixture
def engine(engines: EngineMaker) -> AsyncEngine:
    return engines()


@pytest.fixture
def store(engine: AsyncEngine) -> SqlEventStore:
    return SqlEventStore(engine)


@pytest.fixture
def hot() -> MemoryHotTier:
    return MemoryHotTier()


@pytest.fixture
def event_log(store: SqlEventStore, hot: MemoryHotTier) -> EventLog:
    return EventLog(store, hot)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # Explicit values win over any SHUTTLE_* variables of the environment running the tests.
    return Settings(database_url="", data_dir=tmp_path / "var", events_host="127.0.0.1")


class RunningEvents:
    """The events service as `python -m services.events` builds it, started on a free port."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.service: GrpcService | None = None
        self.port = 0

    async def start(self) -> None:
        self.service = await build(self.settings)
        self.port = await self.service.start("127.0.0.1", 0)

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop(grace=1.0)
            self.service = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningEvents]:
    running = RunningEvents(settings)
    await running.start()
    yield running
    await running.stop()


@pytest.fixture
async def channel(server: RunningEvents) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(server.target) as channel:
        yield channel


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> events_pb2_grpc.EventServiceAsyncStub:
    return events_pb2_grpc.EventServiceStub(channel)


@pytest.fixture
async def tiers(redis_server: str, redis_prefix: str) -> AsyncIterator[TierMaker]:  # noqa: F811
    """Redis hot tiers on one test's key prefix, each closed after the test."""
    made: list[RedisHotTier] = []

    def make(**options: object) -> RedisHotTier:
        made.append(RedisHotTier(redis_server, prefix=redis_prefix, **options))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for tier in made:
        await tier.close()


# Leases: replicas of the log on one database, on a clock the test moves.
START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
# How long a lapsed run waits for an executor to take it over before the sweeper ends it.
ORPHAN_SECONDS = 10.0


@dataclass
class Clock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Replica:
    """One events replica: its own engine, log, hot tier, leases and sweeper."""

    log: EventLog
    leases: LeaseStore
    sweeper: LeaseSweeper


def replica(engines: EngineMaker, clock: Clock) -> Replica:
    engine = engines()
    store = SqlEventStore(engine, clock=clock)
    event_log = EventLog(store, MemoryHotTier())
    leases = LeaseStore(engine, clock=clock, writes=store)
    sweeper = LeaseSweeper(leases, event_log, interval_seconds=1.0, orphan_seconds=ORPHAN_SECONDS)
    return Replica(event_log, leases, sweeper)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def one(engines: EngineMaker, clock: Clock) -> Replica:
    return replica(engines, clock)
