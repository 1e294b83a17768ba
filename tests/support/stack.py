"""Starts the five real Shuttle processes on free ports, as `make run` does."""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass
from pathlib import Path

import grpc

from cli.launcher import GRPC_SERVICES, Supervisor
from shuttle.grpc_auth import ChannelAuth
from shuttle.grpc_client import open_blocking_channel, open_channel
from shuttle.settings import Settings

LOWEST_TEST_PORT = 10_000
"""Below it lie the well-known ports of services a machine may run (PostgreSQL, Redis...)."""


def free_ports(count: int) -> list[int]:
    """Ports free now, below the kernel's ephemeral range. A port that bind(0) returns lies
    in that range, so between this check and the bind of the process it is meant for, the
    kernel may hand it (or a neighbour: replicas at base + 10*i, metrics at base + i) to an
    outgoing connection; below the range it never allocates a port on its own."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low < LOWEST_TEST_PORT + 1_000:  # no room below the range: the kernel's choice, then
        return _kernel_ports(count)
    chosen: list[int] = []
    while len(chosen) < count:
        port = random.randrange(LOWEST_TEST_PORT, low - 100)
        if port not in chosen and _can_listen(port):
            chosen.append(port)
    return chosen


def _kernel_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _can_listen(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Stack:
    supervisor: Supervisor
    gateway: str
    grpc_ports: dict[str, int]

    @property
    def token(self) -> str:
        """The internal token the stack's processes were given (the operator's credential)."""
        return self.supervisor.token

    def target(self, service: str) -> str:
        return f"127.0.0.1:{self.grpc_ports[service]}"

    def channel(self, service: str) -> grpc.aio.Channel:
        """A channel to one of the stack's gRPC services, presenting the operator's token."""
        return open_channel(self.target(service), ChannelAuth.operator(self.token))

    def blocking_channel(self, service: str) -> grpc.Channel:
        return open_blocking_channel(self.target(service), ChannelAuth.operator(self.token))

    def stop(self) -> dict[str, int | None]:
        """Stop every process gracefully; their exit codes by name."""
        processes = dict(self.supervisor.processes)
        self.supervisor.stop()
        return {name: process.returncode for name, process in processes.items()}


def settings_on_free_ports(data_dir: Path) -> Settings:
    events, tools, planner, executor, gateway = free_ports(5)
    return Settings(
        events_port=events,
        tools_port=tools,
        planner_port=planner,
        executor_port=executor,
        gateway_port=gateway,
        data_dir=data_dir,
    )


def start_stack(
    data_dir: Path,
    openai_base_url: str = "",
    extra_env: dict[str, str] | None = None,
    process_env: dict[str, dict[str, str]] | None = None,
) -> Stack:
    """All five processes on free ports; an empty `openai_base_url` means the demo model."""
    settings = settings_on_free_ports(data_dir)
    env = {
        "OPENAI_BASE_URL": openai_base_url,
        "OPENAI_API_KEY": "test-key" if openai_base_url else "",
        "SHUTTLE_DATABASE_URL": "",
        "SHUTTLE_MODEL": "",
        "SHUTTLE_LOG_LEVEL": "INFO",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
        "OTEL_TRACES_EXPORTER": "none",
        **(extra_env or {}),
    }
    supervisor = Supervisor(
        settings, data_dir / "logs", extra_env=env, process_env=process_env or {}
    )
    supervisor.start(timeout_seconds=60)
    ports = {name: settings.grpc_bind(name)[1] for name in GRPC_SERVICES}
    return Stack(supervisor, f"http://127.0.0.1:{settings.gateway_port}", ports)
