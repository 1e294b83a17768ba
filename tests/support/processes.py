"""One more Shuttle service process beside in-process services (e.g. a second executor)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cli.launcher import MODULES, Supervisor
from shuttle.settings import child_environment
from tests.support.stack import free_ports


def start_service_process(
    service: str, env: dict[str, str], log_path: Path, timeout_seconds: float = 30
) -> tuple[subprocess.Popen[bytes], int]:
    """`python -m services.<service>` on a free port, once its health check says SERVING."""
    (port,) = free_ports(1)
    variables = {
        f"SHUTTLE_{service.upper()}_PORT": str(port),
        "SHUTTLE_LOG_FORMAT": "text",
        "OTEL_TRACES_EXPORTER": "none",
        **env,
    }
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", f"services.{service}"],
        env=child_environment(variables),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until_serving(process, port, timeout_seconds)
    except RuntimeError as exc:
        process.kill()
        raise RuntimeError(f"{service} {exc}: {log_path.read_text()[-2000:]}") from None
    return process, port


def wait_until_serving(process: subprocess.Popen[bytes], port: int, timeout_seconds: float) -> None:
    """Poll the process's health check until it says SERVING; RuntimeError if it exits or
    the time runs out (the message says which)."""
    deadline = time.monotonic() + timeout_seconds
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            if process.poll() is not None:
                raise RuntimeError("exited before serving")
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"did not become healthy in {timeout_seconds:.0f} s")
            time.sleep(0.1)


def stop_process(process: subprocess.Popen[bytes]) -> int | None:
    process.terminate()
    try:
        return process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(timeout=5)


def restart_supervised(supervisor: Supervisor, name: str, timeout_seconds: float = 60) -> None:
    """Kill one of a Supervisor's gRPC services (SIGKILL) and start it again on its port,
    with the same environment, once it is healthy again."""
    old = supervisor.processes[name]
    old.kill()
    old.wait()
    log_path = supervisor.log_dir / f"{name}-restarted.log"
    log = log_path.open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", MODULES[name]],
        env={**supervisor.environment(), **supervisor.process_env.get(name, {})},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()  # the child holds its own copy
    supervisor.processes[name] = process
    _, port = supervisor.settings.grpc_bind(name)
    try:
        wait_until_serving(process, port, timeout_seconds)
    except RuntimeError as exc:
        output = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{name} restarted but {exc}: {output}") from None
