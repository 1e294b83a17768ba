"""Shared by the event-log benchmarks: the real events service in-process, scratch databases."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import statistics
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import redis.asyncio as aioredis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shuttle.v1 import events_pb2_grpc

PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "database": "test"}
REDIS_URL = "redis://127.0.0.1:6379/0"
REPO = Path(__file__).resolve().parents[2]


async def _pg_admin(statement: str) -> None:
    conn = await asyncpg.connect(**PG, timeout=5)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def postgres_database() -> AsyncIterator[str | None]:
    """A scratch PostgreSQL database (dropped after), or None when PostgreSQL is absent."""
    name = f"shuttle_bench_{uuid.uuid4().hex[:10]}"
    try:
        await _pg_admin(f'CREATE DATABASE "{name}"')
    except (OSError, asyncpg.PostgresError, TimeoutError):
        yield None
        return
    try:
        yield f"postgresql+asyncpg://{PG['user']}@{PG['host']}:{PG['port']}/{name}"
    finally:
        await _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.asynccontextmanager
async def redis_prefix() -> AsyncIterator[str | None]:
    """A key prefix of its own on the local Redis (keys deleted after), or None."""
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        await client.ping()
    except (OSError, aioredis.RedisError):
        await client.aclose()
        yield None
        return
    prefix = f"shuttle-bench:{uuid.uuid4().hex[:10]}:"
    try:
        yield prefix
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@dataclass(frozen=True)
class Served:
    """A server process the benchmark started, and a stub of its EventService."""

    stub: events_pb2_grpc.EventServiceAsyncStub
    pid: int


@dataclass
class Backend:
    label: str
    database_url: str
    redis_prefix: str | None = None


@contextlib.asynccontextmanager
async def backends(data_dir: Path, with_redis: bool) -> AsyncIterator[list[Backend]]:
    """SQLite (embedded, in-process hot tier) and, when reachable, PostgreSQL (+ Redis)."""
    found = [Backend("sqlite", f"sqlite+aiosqlite:///{data_dir / 'bench.db'}")]
    async with postgres_database() as pg_url, redis_prefix() as prefix:
        if pg_url is not None:
            if with_redis and prefix is not None:
                found.append(Backend("postgresql+redis", pg_url, prefix))
            else:
                found.append(Backend("postgresql", pg_url))
        yield found


@contextlib.asynccontextmanager
async def events_service(backend: Backend, data_dir: Path) -> AsyncIterator[Served]:
    """`python -m services.events` as its own process, as deployed: the benchmark's clients
    then do not share the service's CPU."""
    port = free_port()
    env = {
        **os.environ,
        "SHUTTLE_DATABASE_URL": backend.database_url,
        "SHUTTLE_DATA_DIR": str(data_dir),
        "SHUTTLE_REDIS_URL": REDIS_URL if backend.redis_prefix else "",
        "SHUTTLE_REDIS_KEY_PREFIX": backend.redis_prefix or "shuttle:",
        "SHUTTLE_EVENTS_PORT": str(port),
        "SHUTTLE_LOG_LEVEL": "WARNING",
    }
    async with _serving(port, "services.events", env=env) as served:
        yield served


@contextlib.asynccontextmanager
async def fanout_peer(seconds_per_reader: float) -> AsyncIterator[Served]:
    """`python -m bench.peers.grpc_fanout` as its own process, as the events service runs."""
    port = free_port()
    arguments = ["--port", str(port), "--seconds-per-reader", str(seconds_per_reader)]
    async with _serving(port, "bench.peers.grpc_fanout", *arguments) as served:
        yield served


@contextlib.asynccontextmanager
async def _serving(
    port: int, module: str, *arguments: str, env: dict[str, str] | None = None
) -> AsyncIterator[Served]:
    """`python -m module` until the block ends, once its gRPC health check answers."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *arguments, cwd=REPO, env=env
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), wait_for_ready=True, timeout=60
            )
            yield Served(events_pb2_grpc.EventServiceStub(channel), process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def paced(rate: float, count: int) -> AsyncIterator[int]:
    """Yields 0..count-1 at `rate` per second (catching up, never bursting ahead)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for index in range(count):
        delay = start + index / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        yield index
