"""A replicated stack, as `shuttle up --replicas` starts it: several processes per service
sharing a fresh PostgreSQL database (dropped after) and a Redis key prefix of its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc

from cli.launcher import LaunchError, Supervisor, busy_ports
from cli.replicas import Endpoint, endpoints
from shuttle.grpc_auth import ChannelAuth
from shuttle.grpc_client import open_channel
from shuttle.grpc_targets import client_target
from shuttle.settings import Settings
from tests.support.api_keys import create_api_key
from tests.support.databases import (
    PG_HOST,
    PG_PORT,
    PG_USER,
    REDIS_URL,
    admin_sql,
    delete_redis_keys,
    unavailable,
)
from tests.support.stack import free_ports


@dataclass
class ReplicatedStack:
    supervisor: Supervisor
    database_url: str
    redis_prefix: str

    @property
    def token(self) -> str:
        return self.supervisor.token

    @property
    def gateways(self) -> list[str]:
        """Every gateway's base URL, replica 1 first."""
        return [
            f"http://127.0.0.1:{p.port}"
            for p in self.supervisor.endpoints
            if p.service == "gateway"
        ]

    def replicas(self, service: str) -> list[Endpoint]:
        return [p for p in self.supervisor.endpoints if p.service == service]

    def channel(self, service: str) -> grpc.aio.Channel:
        """A channel balanced over every replica of `service`, as the services dial them."""
        target = ",".join(f"127.0.0.1:{p.port}" for p in self.replicas(service))
        return open_channel(client_target(target), ChannelAuth.operator(self.token))

    def pid_names(self) -> dict[int, str]:
        """Each running process's name by its pid (a lease owner names its executor's pid)."""
        return {p.pid: name for name, p in self.supervisor.processes.items()}

    def kill(self, name: str) -> None:
        """kill -9 one replica; the others go on."""
        self.supervisor.kill(name)

    def restart(self, name: str) -> None:
        self.supervisor.restart(name)

    def create_key(self, tenant: str) -> str:
        """A new API key on the stack's database, made through `shuttle apikey create`."""
        return create_api_key(tenant, {"SHUTTLE_DATABASE_URL": self.database_url})


def free_settings(data_dir: Path, counts: Mapping[str, int], metrics: bool = False) -> Settings:
    """Base ports whose replicas' ports (base + 10*i, gateways consecutive) are all free;
    with `metrics`, a free metrics port for each process too."""
    for _ in range(20):
        events, tools, planner, executor, gateway, metrics_port = free_ports(6)
        settings = Settings(
            metrics_port=metrics_port if metrics else 0,
            events_port=events,
            tools_port=tools,
            planner_port=planner,
            executor_port=executor,
            gateway_port=gateway,
            data_dir=data_dir,
        )
        points = endpoints(settings, counts)
        if all(p.port < 65536 for p in points) and not busy_ports(points):
            return settings
    raise LaunchError("no free ports for the replicas")


@dataclass(frozen=True)
class SharedState:
    database_url: str
    redis_prefix: str

    @property
    def environment(self) -> dict[str, str]:
        return {
            "SHUTTLE_DATABASE_URL": self.database_url,
            "SHUTTLE_REDIS_URL": REDIS_URL,
            "SHUTTLE_REDIS_KEY_PREFIX": self.redis_prefix,
        }


@contextmanager
def shared_state() -> Iterator[SharedState]:
    """A fresh PostgreSQL database and a Redis key prefix of its own; both gone after."""
    name = f"shuttle_replicas_{uuid.uuid4().hex[:12]}"
    try:
        admin_sql(f'CREATE DATABASE "{name}"')
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        unavailable(f"PostgreSQL at {PG_HOST}:{PG_PORT}", exc)
    prefix = f"shuttle-test:{uuid.uuid4().hex[:12]}:"
    try:
        yield SharedState(f"postgresql+asyncpg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}", prefix)
    finally:
        admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        delete_redis_keys(REDIS_URL, prefix)


def model_environment(openai_base_url: str) -> dict[str, str]:
    """A stack's view of a scripted model, with tracing and its exports off."""
    return {
        "OPENAI_BASE_URL": openai_base_url,
        "OPENAI_API_KEY": "test-key",
        "SHUTTLE_MODEL": "",
        "SHUTTLE_LOG_LEVEL": "INFO",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
        "OTEL_TRACES_EXPORTER": "none",
    }


@contextmanager
def replicated_stack(
    data_dir: Path,
    counts: Mapping[str, int],
    openai_base_url: str,
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[ReplicatedStack]:
    """Start every replica of `counts` (services not named: 1) on PostgreSQL and Redis."""
    with shared_state() as shared:
        env = {
            **model_environment(openai_base_url),
            **shared.environment,
            "SHUTTLE_AUTH": "required",
            **(extra_env or {}),
        }
        supervisor = Supervisor(
            free_settings(data_dir, counts), data_dir / "logs", extra_env=env, replicas=counts
        )
        stack = ReplicatedStack(supervisor, shared.database_url, shared.redis_prefix)
        try:
            supervisor.start(timeout_seconds=90)
            yield stack
        finally:
            supervisor.stop()
