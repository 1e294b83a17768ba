"""python_exec through a real tools service process (on uvloop, as deployed): what the
service holds (its environment with the model key, its database, its port) stays out of
a snippet's reach, and a host that cannot build the container stops it at start-up."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.tools.builtins.sandbox import Sandbox, SandboxUnavailable
from shuttle.settings import child_environment
from shuttle.v1 import tools_pb2, tools_pb2_grpc
from tests.support.processes import start_service_process, stop_process
from tests.support.stack import free_ports
from tests.tools.sandbox_support import BWRAP, DISARM, prepared_sandbox

FAKE_KEY = "sk-shuttle-test-c0ffee-not-a-real-key"


@dataclass
class ToolsProcess:
    process: subprocess.Popen[bytes]
    port: int
    data: Path
    calls: int = 0

    def python(self, code: str, workflow: str = "wf-attack") -> tools_pb2.ExecuteResponse:
        self.calls += 1
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            return tools_pb2_grpc.ToolServiceStub(channel).Execute(
                tools_pb2.ExecuteRequest(
                    workflow_id=workflow,
                    tenant_id="acme",
                    call_id=f"call-{self.calls}",
                    tool_name="python_exec",
                    arguments_json=json.dumps({"code": code}),
                ),
                timeout=60,
            )

    def serving(self) -> bool:
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def tools_environment(data: Path, **extra: str) -> dict[str, str]:
    return {
        "SHUTTLE_PYTHON_EXEC_ENABLED": "true",
        "SHUTTLE_PYTHON_EXEC_BWRAP": BWRAP,
        "SHUTTLE_DATA_DIR": str(data),
        "SHUTTLE_DATABASE_URL": f"sqlite+aiosqlite:///{data / 'shuttle.db'}",
        "SHUTTLE_EVENT_LOOP": "uvloop",
        "OPENAI_API_KEY": FAKE_KEY,
        **extra,
    }


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolsProcess]:
    prepared_sandbox()  # skips (or fails under CI) where bubblewrap cannot run
    data = tmp_path_factory.mktemp("tools-data")
    process, port = start_service_process("tools", tools_environment(data), data / "tools.log")
    try:
        yield ToolsProcess(process, port, data)
    finally:
        stop_process(process)


pytestmark = pytest.mark.integration


@pytest.mark.sandbox
def test_the_model_key_in_the_services_environment_is_out_of_reach(tools: ToolsProcess) -> None:
    environ = Path(f"/proc/{tools.process.pid}/environ").read_bytes()
    assert FAKE_KEY.encode() in environ  # the service really holds it
    code = DISARM + (
        "import os\n"
        f"for pid in ['1', str(os.getppid()), 'self', '{tools.process.pid}']:\n"
        "    try:\n"
        "        print('environ of', pid, open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as exc:\n"
        "        print('refused', pid, exc.strerror)\n"
        "print(sorted(os.listdir('/proc'))[:20])\n"
    )
    reply = tools.python(code)
    assert not reply.error, reply.observation
    assert FAKE_KEY not in reply.observation
    assert "OPENAI" not in reply.observation
    assert reply.observation.count("environ of") + reply.observation.count("refused") == 4
    assert f"refused {tools.process.pid} No such file or directory" in reply.observation


@pytest.mark.sandbox
def test_the_services_database_file_is_out_of_reach(tools: ToolsProcess) -> None:
    database = tools.data / "shuttle.db"
    assert database.read_bytes().startswith(b"SQLite format 3")
    code = DISARM + (
        "import sqlite3\n"
        "try:\n"
        f"    print('READ', open({str(database)!r}, 'rb').read(16))\n"
        "except OSError as exc:\n"
        "    print('refused', exc.strerror)\n"
        "try:\n"
        f"    db = sqlite3.connect('file:{database}?mode=ro', uri=True)\n"
        "    print('TABLES', db.execute('select name from sqlite_master').fetchall())\n"
        "except sqlite3.Error as exc:\n"
        "    print('refused', exc)\n"
    )
    reply = tools.python(code)
    assert "READ" not in reply.observation and "TABLES" not in reply.observation
    assert "refused No such file or directory" in reply.observation
    assert "refused unable to open database file" in reply.observation


@pytest.mark.sandbox
def test_the_services_own_port_is_unreachable_and_it_stays_up(tools: ToolsProcess) -> None:
    code = DISARM + (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {tools.port}), timeout=5)\n"
        "    print('CONNECTED')\n"
        "except OSError as exc:\n"
        "    print('refused', exc.strerror)\n"
    )
    reply = tools.python(code)
    assert "CONNECTED" not in reply.observation
    assert "refused Address family not supported by protocol" in reply.observation
    bomb = tools.python(DISARM + "import os\nwhile True:\n    os.fork()\n")
    assert bomb.error and "Operation not permitted" in bomb.observation
    hog = tools.python("x = bytearray(2**40)")
    assert hog.error and "ran out of memory" in hog.observation
    assert tools.serving()
    assert tools.python("print('after', 6 * 7)").observation.strip() == "after 42"


def start_up_failure(env: dict[str, str], tmp_path: Path, prefix: list[str]) -> str:
    """Start the tools service (wrapped in `prefix`); it must exit, and says why on stderr."""
    (port,) = free_ports(1)
    variables = {**env, "SHUTTLE_TOOLS_PORT": str(port), "OTEL_TRACES_EXPORTER": "none"}
    finished = subprocess.run(
        [*prefix, sys.executable, "-m", "services.tools"],
        env=child_environment(variables),
        capture_output=True,
        timeout=120,
    )
    assert finished.returncode != 0
    return finished.stderr.decode()


def test_without_bubblewrap_enabling_python_exec_stops_start_up(tmp_path: Path) -> None:
    missing = tmp_path / "no-bwrap-here"
    with pytest.raises(SandboxUnavailable, match=r"apt-get install bubblewrap"):
        asyncio.run(Sandbox.prepare(str(missing)))
    said = start_up_failure(
        tools_environment(tmp_path, SHUTTLE_PYTHON_EXEC_BWRAP=str(missing)), tmp_path, []
    )
    assert f"{missing} (SHUTTLE_PYTHON_EXEC_BWRAP) is not an executable file" in said
    assert "apt-get install bubblewrap" in said
    assert not (tmp_path / "shuttle.db").exists()  # it stopped before opening anything


@pytest.mark.sandbox
def test_without_user_namespaces_enabling_python_exec_stops_start_up(tmp_path: Path) -> None:
    prepared_sandbox()
    # A real restricted host: the service runs where no further user namespace may be made.
    jail = [BWRAP, "--dev-bind", "/", "/", "--unshare-user", "--disable-userns", "--"]
    said = start_up_failure(tools_environment(tmp_path), tmp_path, jail)
    assert "a trial container failed" in said
    assert "Creating new namespace failed" in said  # bwrap's own words
    assert "user namespaces" in said and "seccompProfile Unconfined" in said
