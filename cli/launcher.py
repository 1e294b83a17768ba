"""Starts the five Shuttle processes, waits until each is healthy, stops them together."""

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

from shuttle.grpc_auth import ChannelAuth, TlsFiles
from shuttle.grpc_client import open_blocking_channel
from shuttle.settings import Settings, SettingsError, child_environment

# Start order: what the executor calls must be up before it.
GRPC_SERVICES = ("events", "tools", "planner", "executor")
ALL_PROCESSES = (*GRPC_SERVICES, "gateway")
MODULES = {name: f"services.{name}" for name in GRPC_SERVICES} | {"gateway": "gateway"}
# Under the data dir: the launch's internal token, for an operator's grpcurl.
TOKEN_FILE = "internal-token"


class LaunchError(RuntimeError):
    pass


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int

    @property
    def variable(self) -> str:
        return f"SHUTTLE_{self.name.upper()}_PORT"


def endpoints(settings: Settings) -> list[Endpoint]:
    found = [Endpoint(name, *settings.grpc_bind(name)) for name in GRPC_SERVICES]
    return [*found, Endpoint("gateway", settings.gateway_host, settings.gateway_port)]


def busy_ports(points: list[Endpoint]) -> list[str]:
    """A message for each port some other process already holds."""
    problems = []
    for point in points:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((point.host, point.port))
            except OSError:
                problems.append(
                    f"port {point.port} ({point.name}) on {point.host} is already in use: "
                    f"stop the process using it or set {point.variable} to a free port"
                )
    return problems


@dataclass
class Supervisor:
    """Owns the service processes; logs go to one file per process under `log_dir`."""

    settings: Settings
    log_dir: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    process_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Variables for one process only, by name (e.g. a metrics port each)."""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    token: str = ""
    """The credential every process is given: SHUTTLE_INTERNAL_TOKEN when set, else a new
    one per launch."""
    _logs: list[IO[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.token = self.token or self.settings.internal_token or secrets.token_urlsafe(32)

    @property
    def token_file(self) -> Path:
        return self.settings.data_dir / TOKEN_FILE

    def environment(self) -> dict[str, str]:
        s = self.settings
        pinned = {f"SHUTTLE_{e.name.upper()}_PORT": str(e.port) for e in endpoints(s)}
        pinned |= {f"SHUTTLE_{e.name.upper()}_HOST": e.host for e in endpoints(s)}
        pinned["SHUTTLE_DATA_DIR"] = str(s.data_dir)
        return child_environment({**pinned, **self.extra_env, "SHUTTLE_INTERNAL_TOKEN": self.token})

    def channel_auth(self) -> ChannelAuth:
        """The operator's credential on this launch (and its certificates, under mutual TLS)."""
        try:
            return ChannelAuth.operator(self.token, TlsFiles.from_settings(self.settings))
        except SettingsError as exc:
            raise LaunchError(str(exc)) from None

    def start(self, timeout_seconds: float = 30.0) -> None:
        problems = busy_ports(endpoints(self.settings))
        if problems:
            raise LaunchError("\n".join(problems))
        probe = self.channel_auth()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        write_private(self.token_file, self.token)
        env = self.environment()
        try:
            for point in endpoints(self.settings):
                log = open(self.log_dir / f"{point.name}.log", "ab")  # noqa: SIM115
                self._logs.append(log)
                self.processes[point.name] = subprocess.Popen(
                    [sys.executable, "-m", MODULES[point.name]],
                    env={**env, **self.process_env.get(point.name, {})},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # A Ctrl-C in the terminal reaches only the supervisor, which then stops
                    # the services in order (gateway first, events last).
                    start_new_session=True,
                )
                self._wait_healthy(point, probe, time.monotonic() + timeout_seconds)
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self, point: Endpoint, probe: ChannelAuth, deadline: float) -> None:
        process = self.processes[point.name]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise LaunchError(
                    f"{point.name} exited with code {process.returncode} while starting; "
                    f"last lines of {self.log_dir / (point.name + '.log')}:\n"
                    + self.tail(point.name)
                )
            if _is_healthy(point, probe):
                return
            time.sleep(0.1)
        raise LaunchError(f"{point.name} did not become healthy in time:\n{self.tail(point.name)}")

    def tail(self, name: str, lines: int = 20) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def crashed(self) -> list[str]:
        return [name for name, p in self.processes.items() if p.poll() is not None]

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
        for log in self._logs:
            log.close()
        self._logs.clear()
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
    if point.name == "gateway":
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
