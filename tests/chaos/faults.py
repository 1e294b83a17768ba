"""Fault injection on the real processes: kill -9 and restart one service of a stack."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shuttle.launcher import MODULES
from tests.support.stack import Stack


def kill_and_restart(stack: Stack, name: str, timeout_seconds: float = 60.0) -> None:
    """SIGKILL the service (no shutdown, no flush), then start it again on the same port
    with the same environment (hence the same database), and wait until it serves."""
    supervisor = stack.supervisor
    supervisor.processes[name].kill()
    supervisor.processes[name].wait()
    with (supervisor.log_dir / f"{name}.log").open("ab") as log:
        # The child keeps its own descriptor of the log; ours can close at once.
        supervisor.processes[name] = subprocess.Popen(
            [sys.executable, "-m", MODULES[name]],
            env={**supervisor.environment(), **supervisor.process_env.get(name, {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    wait_serving(stack, name, timeout_seconds)


def wait_serving(stack: Stack, name: str, timeout_seconds: float) -> None:
    process = stack.supervisor.processes[name]
    deadline = time.monotonic() + timeout_seconds
    with grpc.insecure_channel(f"127.0.0.1:{stack.grpc_ports[name]}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited on restart:\n{stack.supervisor.tail(name)}")
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not serve again:\n{stack.supervisor.tail(name)}")
            time.sleep(0.05)
