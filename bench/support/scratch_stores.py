"""Scratch stores for the event-log benchmarks: a PostgreSQL database and a Redis key prefix
of their own, dropped after, and the backends a benchmark runs the events service on."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import redis.asyncio as aioredis

PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "database": "test"}
REDIS_URL = "redis://127.0.0.1:6379/0"


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
