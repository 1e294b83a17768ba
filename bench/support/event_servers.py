"""The events service, or its bare fan-out peer, as a process of its own for the event-log
benchmarks, and a stub of its EventService once it answers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.support.scratch_stores import REDIS_URL, Backend
from shuttle.v1 import events_pb2_grpc

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Served:
    """A server process the benchmark started, and a stub of its EventService."""

    stub: events_pb2_grpc.EventServiceAsyncStub
    pid: int


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
