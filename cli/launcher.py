"""Starts the Shuttle processes (five, or more with replicas), waits until each is healthy,
stops them together."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cli.replicas import GRPC_SERVICES, Endpoint, client_targets, endpoints, is_replicated
from shuttle.grpc_auth import ChannelAuth, TlsFiles
from shuttle.grpc_client import open_blocking_channel
from shuttle.settings import Settings, SettingsError, child_environment

MODULES = {name: f"services.{name}" for name in GRPC_SERVICES} | {"gateway": "gateway"}
# Under the data dir: the launch's internal token, for an operator's grpcurl.
TOKEN_FILE = "internal-token"
__all__ = ["GRPC_SERVICES", "Endpoint", "LaunchError", "Supervisor", "endpoints"]


class LaunchError(RuntimeError):
    pass


def busy_ports(points: list[Endpoint]) -> list[str]:
    """A message for each port some other process already holds."""
    problems = []
    for point in points:
        offset = "" if point.replica == 1 else " (the replicas' ports follow from it)"
        wanted = [(point.port, point.variable, offset)]
        if point.metrics_port:
            follow = " (each process's follows from it)"
            wanted.append((point.metrics_port, "SHUTTLE_METRICS_PORT", follow))
        for port, variable, note in wanted:
            if not _can_bind(point.host, port):
                problems.append(
                    f"port {port} ({point.name}) on {point.host} is already in use: "
                    f"stop the process using it or set {variable} to a free port{note}"
                )
    return problems


def _can_bind(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except (OSError, OverflowError):  # OverflowError: a port past 65535
            return False
    return True


@dataclass
class Supervisor:
    """Owns the service processes; logs go to one file per process under `log_dir`."""

    settings: Settings
    log_dir: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    process_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Variables for one process only, by name (e.g. a metrics port each)."""
    replicas: Mapping[str, int] = field(default_factory=dict)
    """Processes per service (cli/replicas.py); a service not named has one."""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    token: str = ""
    """The credential every process is given: SHUTTLE_INTERNAL_TOKEN when set, else a new
    one per launch."""
    ticket_secret: str = ""
    """Replicated gateways' shared stream-ticket key: SHUTTLE_TICKET_SECRET when set, else
    a new one per launch (a ticket from one gateway is then good at every other)."""
    _logs: dict[str, IO[bytes]] = field(default_factory=dict)
    _log_starts: dict[str, int] = field(default_factory=dict)
    """Where each process's own lines begin in its log (earlier runs' lines come before)."""

    def __post_init__(self) -> None:
        self.token = self.token or self.settings.internal_token or secrets.token_urlsafe(32)
        self.ticket_secret = (
            self.ticket_secret
            or self.extra_env.get("SHUTTLE_TICKET_SECRET", "")
            or self.settings.ticket_secret
            or secrets.token_urlsafe(32)
        )

    @property
    def endpoints(self) -> list[Endpoint]:
        return endpoints(self.settings, self.replicas)

    def endpoint(self, name: str) -> Endpoint:
        return next(point for point in self.endpoints if point.name == name)

    @property
    def token_file(self) -> Path:
        return self.settings.data_dir / TOKEN_FILE

    def environment(self) -> dict[str, str]:
        s = self.settings
        pinned = {f"SHUTTLE_{e.service.upper()}_PORT": str(e.port) for e in endpoints(s)}
        pinned |= {f"SHUTTLE_{e.service.upper()}_HOST": e.host for e in endpoints(s)}
        pinned["SHUTTLE_DATA_DIR"] = str(s.data_dir)
        if is_replicated(self.replicas):
            pinned |= client_targets(self.endpoints)
        return child_environment({**pinned, **self.extra_env, "SHUTTLE_INTERNAL_TOKEN": self.token})

    def channel_auth(self) -> ChannelAuth:
        """The operator's credential on this launch (and its certificates, under mutual TLS)."""
        try:
            return ChannelAuth.operator(self.token, TlsFiles.from_settings(self.settings))
        except SettingsError as exc:
            raise LaunchError(str(exc)) from None

    def start(self, timeout_seconds: float = 30.0) -> None:
        problems = busy_ports(self.endpoints)
        if problems:
            raise LaunchError("\n".join(problems))
        self.channel_auth()  # certificate problems refused before any process starts
        self.log_dir.mkdir(parents=True, exist_ok=True)
        write_private(self.token_file, self.token)
        try:
            for point in self.endpoints:
                self._spawn(point, timeout_seconds)
        except BaseException:
            self.stop()
            raise

    def process_environment(self, point: Endpoint) -> dict[str, str]:
        """The environment of one process: the launch's, its own port, its extras."""
        own = {point.variable: str(point.port)}
        if point.metrics_port:
            own["SHUTTLE_METRICS_PORT"] = str(point.metrics_port)
        if point.service == "gateway" and is_replicated(self.replicas):
            own["SHUTTLE_GATEWAY_REPLICAS"] = str(self.replicas.get("gateway", 1))
            own["SHUTTLE_TICKET_SECRET"] = self.ticket_secret
        return {**self.environment(), **own, **self.process_env.get(point.name, {})}

    def spawn(self, point: Endpoint) -> subprocess.Popen[bytes]:
        """Start one process (its log appended to), without waiting for it."""
        if point.name in self._logs:
            self._logs.pop(point.name).close()
        log = open(self.log_path(point.name), "ab")  # noqa: SIM115
        self._logs[point.name] = log
        self._log_starts[point.name] = log.tell()
        process = subprocess.Popen(
            [sys.executable, "-m", MODULES[point.service]],
            env=self.process_environment(point),
            stdout=log,
            stderr=subprocess.STDOUT,
            # A Ctrl-C in the terminal reaches only the supervisor, which then stops
            # the services in order (gateway first, events last).
            start_new_session=True,
        )
        self.processes[point.name] = process
        return process

    def _spawn(self, point: Endpoint, timeout_seconds: float) -> None:
        """Start one process and wait until it is healthy."""
        self.spawn(point)
        self._wait_healthy(point, self.channel_auth(), time.monotonic() + timeout_seconds)

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def healthy(self, name: str) -> bool:
        """Whether process `name` answers its health check now (one probe)."""
        return _is_healthy(self.endpoint(name), self.channel_auth())

    def kill(self, name: str) -> None:
        """SIGKILL one process (a replica lost), leaving the others running."""
        process = self.processes[name]
        process.kill()
        process.wait()

    def restart(self, name: str, timeout_seconds: float = 60.0) -> None:
        """Start a stopped process again on its own port; returns once it is healthy."""
        if self.processes[name].poll() is None:
            raise LaunchError(f"{name} is still running")
        self._spawn(self.endpoint(name), timeout_seconds)

    def _wait_healthy(self, point: Endpoint, probe: ChannelAuth, deadline: float) -> None:
        process = self.processes[point.name]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise LaunchError(
                    f"{point.name} exited with code {process.returncode} while starting; "
                    f"last lines of {self.log_path(point.name)}:\n" + self.tail(point.name)
                )
            if _is_healthy(point, probe):
                return
            time.sleep(0.1)
        raise LaunchError(f"{point.name} did not become healthy in time:\n{self.tail(point.name)}")

    def tail(self, name: str, lines: int = 20) -> str:
        """The last `lines` lines the current (or last) process of `name` logged."""
        path = self.log_path(name)
        if not path.exists():
            return ""
        with path.open("rb") as log:
            log.seek(self._log_starts.get(name, 0))
            text = log.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_seconds: float = 15.0) -> None:
        """SIGTERM in reverse start order (gateway first), then SIGKILL what is left."""
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(grace_seconds)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.processes.clear()
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        self._log_starts.clear()
        self.token_file.unlink(missing_ok=True)


def write_private(path: Path, text: str) -> None:
    """`text` in a file only its owner may read (0600), replaced whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # a leftover partial file keeps its mode through O_CREAT
    with os.fdopen(descriptor, "w") as out:
        out.write(text + "\n")
    os.replace(partial, path)


def _is_healthy(point: Endpoint, probe: ChannelAuth) -> bool:
    host = "127.0.0.1" if point.host in ("0.0.0.0", "") else point.host
    if point.service == "gateway":
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"http://{host}:{point.port}/readyz", timeout=2.0).status_code == 200
        return False
    with open_blocking_channel(f"{host}:{point.port}", probe) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1.0
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
