"""The two stacks the takeover matrix runs on.

- `ReplicatedTarget`: three executors (and two gateways) on PostgreSQL and Redis, started by
  the test's own Supervisor, as `shuttle up --replicas` lays them out; a killed executor is
  started again by the test once its case is over.
- `UpStack`: the embedded stack (SQLite, in-process hot tier) under the real `shuttle up`,
  which must restart its one executor after a kill -9: only the restarted executor can take
  the run over.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shuttle.grpc_auth import ChannelAuth
from shuttle.grpc_client import open_channel
from shuttle.settings import Settings
from tests.support.replicated_stack import ReplicatedStack
from tests.support.stack import settings_on_free_ports

UP_START_SECONDS = 120.0
REVIVE_SECONDS = 120.0


@dataclass
class ReplicatedTarget:
    stack: ReplicatedStack
    workspace_root: Path
    name: str = "replicated"
    restarts_itself: bool = False

    @property
    def gateways(self) -> list[str]:
        return self.stack.gateways

    def channel(self, service: str) -> grpc.aio.Channel:
        return self.stack.channel(service)

    def executor_names(self) -> list[str]:
        return [p.name for p in self.stack.replicas("executor")]

    def name_of(self, pid: int) -> str:
        name = self.stack.pid_names().get(pid, "")
        assert name.startswith("executor"), f"pid {pid} is not one of the stack's executors"
        return name

    def kill_executor(self, pid: int) -> None:
        self.stack.kill(self.name_of(pid))

    def stop_executor(self, name: str) -> int | None:
        """SIGTERM one executor and wait for it to exit (it hands its runs over)."""
        process = self.stack.supervisor.processes[name]
        process.terminate()
        return process.wait(timeout=60)

    def revive(self) -> None:
        for name in self.executor_names():
            if self.stack.supervisor.processes[name].poll() is not None:
                self.stack.restart(name)


def proc_stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent pid, from /proc; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, parent = stat[stat.rfind(")") + 2 :].split()[:2]
    return state, int(parent)


def module_of(pid: int) -> str:
    """The `-m` module a Python process runs ("" if none)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    words = [word.decode(errors="replace") for word in argv]
    return words[words.index("-m") + 1] if "-m" in words[:-1] else ""


@dataclass
class UpStack:
    process: subprocess.Popen[bytes]
    settings: Settings
    token: str
    output: Path
    workspace_root: Path
    name: str = "embedded"
    restarts_itself: bool = True

    @property
    def gateways(self) -> list[str]:
        return [f"http://127.0.0.1:{self.settings.gateway_port}"]

    def channel(self, service: str) -> grpc.aio.Channel:
        target = f"127.0.0.1:{self.settings.grpc_bind(service)[1]}"
        return open_channel(target, ChannelAuth.operator(self.token))

    def executor_pids(self) -> list[int]:
        """The live executors `shuttle up` started (its children running services.executor)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            stat = proc_stat(int(entry.name))
            if stat is None or stat[1] != self.process.pid or stat[0] == "Z":
                continue
            if module_of(int(entry.name)) == "services.executor":
                found.append(int(entry.name))
        return found

    def kill_executor(self, pid: int) -> None:
        assert pid in self.executor_pids(), f"pid {pid} is not this shuttle up's executor"
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while pid in self.executor_pids():
            assert time.monotonic() < deadline, f"executor {pid} outlived SIGKILL"
            time.sleep(0.05)

    def revive(self) -> None:
        """Wait for `shuttle up` to have started the executor again and for it to serve."""
        deadline = time.monotonic() + REVIVE_SECONDS
        port = self.settings.executor_port
        while not (self.executor_pids() and serving(port)):
            if self.process.poll() is not None:
                raise AssertionError(
                    f"shuttle up exited ({self.process.returncode}) instead of restarting its "
                    f"executor:\n{self.tail()}"
                )
            assert time.monotonic() < deadline, f"no executor came back:\n{self.tail()}"
            time.sleep(0.2)

    def tail(self, lines: int = 30) -> str:
        text = self.output.read_text(errors="replace") if self.output.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


@contextmanager
def shuttle_up(
    data_dir: Path, model_environment: Mapping[str, str], env: Mapping[str, str]
) -> Iterator[UpStack]:
    """`python -m cli up` on free ports with SQLite under `data_dir`; stopped with Ctrl-C."""
    settings = settings_on_free_ports(data_dir)
    token = secrets.token_urlsafe(24)
    variables = {
        **os.environ,
        **model_environment,
        **env,
        "SHUTTLE_DATABASE_URL": "",
        "SHUTTLE_REDIS_URL": "",
        "SHUTTLE_DATA_DIR": str(data_dir),
        "SHUTTLE_INTERNAL_TOKEN": token,
        **{
            f"SHUTTLE_{name.upper()}_PORT": str(settings.grpc_bind(name)[1])
            for name in ("events", "tools", "planner", "executor")
        },
        "SHUTTLE_GATEWAY_PORT": str(settings.gateway_port),
    }
    output = data_dir / "shuttle-up.out"
    with output.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "up"], env=variables, stdout=out, stderr=subprocess.STDOUT
        )
    workspace_root = Path(env.get("SHUTTLE_TOOL_WORKSPACE_DIR", data_dir / "workspaces"))
    stack = UpStack(process, settings, token, output, workspace_root)
    try:
        deadline = time.monotonic() + UP_START_SECONDS
        while "Press Ctrl-C to stop." not in output.read_text(errors="replace"):
            if process.poll() is not None:
                raise AssertionError(f"shuttle up exited ({process.returncode}):\n{stack.tail()}")
            assert time.monotonic() < deadline, f"shuttle up did not start:\n{stack.tail()}"
            time.sleep(0.2)
        yield stack
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
