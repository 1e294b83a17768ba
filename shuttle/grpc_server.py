"""Bootstrap shared by every gRPC service: aio server, health, reflection, graceful stop."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from shuttle.grpc_auth import NO_SERVER_AUTH, MethodRoles, ServerAuth
from shuttle.grpc_tracing import server_interceptors
from shuttle.metrics import MetricsInterceptor

log = logging.getLogger(__name__)

Registrar = Callable[[grpc.aio.Server], None]
# Servicer methods annotate their context with this; the request/response parameters of
# grpc.aio.ServicerContext add nothing the method signature does not already say.
Context = grpc.aio.ServicerContext[Any, Any]
Cleanup = Callable[[], Awaitable[None]]

# The aio server takes calls from gRPC core one at a time, one per turn of the event loop.
# When the loop is saturated (a thousand runs at once), new calls queue inside core, and core
# drops queued calls in two ways, both seen by the client as a bare CANCELLED from a handler
# that never ran: a call queued longer than `grpc.server_max_unrequested_time_in_server`
# (30 s by default), and, past `grpc.server.max_pending_requests` (1,000) queued calls, a
# random share of the new ones (all of them past the hard limit, 3,000). A queued call is
# accepted work: it waits for its turn, bounded by the caller's deadline.
QUEUED_CALL_WAIT_SECONDS = 24 * 3600
QUEUED_CALLS_MAX = 1_000_000

# Keep idle streams (SSE tails can be quiet for minutes) alive through proxies.
SERVER_OPTIONS = [
    ("grpc.server_max_unrequested_time_in_server", QUEUED_CALL_WAIT_SECONDS),
    ("grpc.server.max_pending_requests", QUEUED_CALLS_MAX),
    ("grpc.server.max_pending_requests_hard_limit", QUEUED_CALLS_MAX),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
]


class PortInUseError(RuntimeError):
    pass


@dataclass(frozen=True)
class ConnectionAge:
    """How long the server keeps a client's connection (0: for good), and the grace the
    calls on it get after its GOAWAY. A client whose connection ends opens a new one and
    resolves its target again, so replicas started since (a scale-out) get calls; gRPC
    spreads the ages by up to 10% so a replica's connections do not all end at once."""

    seconds: float = 300.0
    grace_seconds: float = 30.0

    def options(self) -> list[tuple[str, int]]:
        if self.seconds <= 0:
            return []
        return [
            ("grpc.max_connection_age_ms", max(1, round(self.seconds * 1000))),
            ("grpc.max_connection_age_grace_ms", round(self.grace_seconds * 1000)),
        ]


@dataclass
class GrpcService:
    """One gRPC server hosting some shuttle.v1 services plus health and reflection; with
    `auth` enabled every call but Health's must present a credential, and a role `roles`
    allows for its method (reflection: any role)."""

    name: str
    service_names: Sequence[str]
    register: Registrar
    on_stop: Sequence[Cleanup] = field(default_factory=tuple)
    on_stopping: Sequence[Cleanup] = field(default_factory=tuple)
    """Run first on stop, before in-flight RPCs get their grace period (e.g. hand work over)."""
    auth: ServerAuth = NO_SERVER_AUTH
    roles: MethodRoles = field(default_factory=dict)
    connection_age: ConnectionAge = field(default_factory=ConnectionAge)
    port: int = 0
    _server: grpc.aio.Server | None = None
    _health: health_aio.HealthServicer | None = None

    async def start(self, host: str, port: int, port_variable: str = "") -> int:
        """Serve on host:port; SettingsError when `host` is beyond loopback and no credential
        is required of callers."""
        self.auth.check_bind(host, port)
        interceptors: list[grpc.aio.ServerInterceptor] = [
            *server_interceptors(),
            MetricsInterceptor(),
        ]
        check = self.auth.interceptor(self.roles)
        if check is not None:
            interceptors.append(check)  # innermost: see grpc_auth._CallerCheck
        server = grpc.aio.server(
            options=[*SERVER_OPTIONS, *self.connection_age.options()], interceptors=interceptors
        )
        self.register(server)
        health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        reflection.enable_server_reflection(
            [
                *self.service_names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            server,
        )
        credentials = self.auth.server_credentials()
        try:
            if credentials is None:
                self.port = server.add_insecure_port(f"{host}:{port}")
            else:
                self.port = server.add_secure_port(f"{host}:{port}", credentials)
        except RuntimeError as exc:
            hint = f"; set {port_variable} to another port" if port_variable else ""
            raise PortInUseError(
                f"{self.name}: cannot listen on {host}:{port} (already in use?){hint}"
            ) from exc
        await server.start()
        for svc in ("", *self.service_names):
            await health.set(svc, health_pb2.HealthCheckResponse.SERVING)
        self._server, self._health = server, health
        log.info(
            "listening",
            extra={
                "service_name": self.name,
                "host": host,
                "port": self.port,
                "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            },
        )
        return self.port

    async def stop(self, grace: float = 5.0) -> None:
        """Report NOT_SERVING, run `on_stopping`, finish in-flight RPCs within `grace`,
        then run cleanups."""
        if self._server is None:
            return
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        for stopping in self.on_stopping:
            await stopping()
        await self._server.stop(grace)
        self._server = None
        for cleanup in self.on_stop:
            await cleanup()
        log.info("stopped", extra={"service_name": self.name})

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()


async def run_until_signalled(
    service: GrpcService, host: str, port: int, port_variable: str, grace: float
) -> None:
    """Serve until SIGTERM or SIGINT, then stop gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await service.start(host, port, port_variable)
    await stop.wait()
    log.info("shutting down", extra={"service_name": service.name})
    await service.stop(grace)
