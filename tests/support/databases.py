"""Real PostgreSQL and Redis for tests: a fresh database per session, unique Redis prefixes.

Locally a missing server skips the tests that need it, saying why; under CI (CI=true) it
fails them, so a broken CI machine cannot pass by skipping.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import pytest
import redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.events.migrate import migrate
from shuttle.db import create_engine

PG_HOST, PG_PORT, PG_USER, PG_ADMIN_DB = "127.0.0.1", 5432, "postgres", "test"
REDIS_URL = "redis://127.0.0.1:6379/0"


def unavailable(what: str, why: object) -> None:
    message = f"{what} is not reachable ({why}); .ci/run installs and starts it"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def admin_sql(statement: str) -> None:
    """Run one statement on the admin database, from sync or async code alike (a thread of
    its own gives asyncpg a loop even when the caller is inside one)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, _admin(statement)).result()


async def _admin(statement: str) -> None:
    conn = await asyncpg.connect(
        host=PG_HOST, port=PG_PORT, user=PG_USER, database=PG_ADMIN_DB, timeout=5
    )
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A freshly created database for this test session, dropped at the end."""
    name = f"shuttle_test_{uuid.uuid4().hex[:12]}"
    try:
        admin_sql(f'CREATE DATABASE "{name}"')
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        unavailable(f"PostgreSQL at {PG_HOST}:{PG_PORT}", exc)
    yield f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


EngineMaker = Callable[[], AsyncEngine]


@asynccontextmanager
async def schema_engines(postgres_url: str, migrated: bool = True) -> AsyncIterator[EngineMaker]:
    """Makes engines on one schema of its own in the session database (with the events
    tables unless `migrated` is false; dropped after), so tests may reuse workflow ids
    without meeting each other."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    setup = create_engine(postgres_url)
    async with setup.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    made: list[AsyncEngine] = []

    def make() -> AsyncEngine:
        engine = create_engine(
            postgres_url, connect_args={"server_settings": {"search_path": schema}}
        )
        made.append(engine)
        return engine

    try:
        if migrated:
            await migrate(make())
        yield make
    finally:
        for engine in made:
            await engine.dispose()
        async with setup.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await setup.dispose()


@pytest.fixture(scope="session")
def redis_server() -> str:
    """The shared Redis on 127.0.0.1:6379 (tests use key prefixes of their own)."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        unavailable("Redis at 127.0.0.1:6379", exc)
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_server: str) -> Iterator[str]:
    """A key prefix no other test uses; its keys are deleted afterwards."""
    prefix = f"shuttle-test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    delete_redis_keys(redis_server, prefix)


def delete_redis_keys(url: str, prefix: str) -> None:
    """Delete every key under `prefix`."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class PrivateRedis:
    """A redis-server process of the test's own, so a test can stop it mid-run."""

    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            unavailable("redis-server", "not installed")
            return
        command = [binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            finally:
                client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


@pytest.fixture
def private_redis(redis_server: str) -> Iterator[PrivateRedis]:
    server = PrivateRedis(free_port())
    server.start()
    yield server
    server.stop()
