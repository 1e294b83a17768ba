"""One stack with authentication required, shared by the gateway tests, and keys for two
tenants made the way an operator makes them (`shuttle apikey create`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from shuttle.settings import Settings
from tests.support.api_keys import create_api_key
from tests.support.databases import (  # noqa: F401 - fixtures
    private_redis,
    redis_prefix,
    redis_server,
)
from tests.support.events_process import EventsProcess
from tests.support.gateway_server import GatewayServer
from tests.support.stack import Stack, start_stack

TICKET_SECRET = "gateway-tests-ticket-secret"
BROWSER_DIR = Path(__file__).parent / "browser"
PROTO_DIR = Path(__file__).parents[2] / "proto"


@dataclass
class AuthStack:
    stack: Stack
    data_dir: Path
    url: str
    key_a: str
    key_b: str

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def settings(self, **overrides: object) -> Settings:
        """Settings for another gateway in front of the same backends and database."""
        ports = self.stack.grpc_ports
        values: dict[str, object] = {
            "events_port": ports["events"],
            "tools_port": ports["tools"],
            "planner_port": ports["planner"],
            "executor_port": ports["executor"],
            "data_dir": self.data_dir,
            "database_url": "",
            "auth": "required",
            "ticket_secret": TICKET_SECRET,
            "internal_token": self.stack.token,
            **overrides,
        }
        return Settings(**values)  # type: ignore[arg-type]


def create_key(data_dir: Path, tenant: str) -> str:
    return create_api_key(tenant, {"SHUTTLE_DATA_DIR": str(data_dir), "SHUTTLE_DATABASE_URL": ""})


@pytest.fixture(scope="session")
def auth_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthStack]:
    data_dir = Path(tmp_path_factory.mktemp("auth-stack"))
    key_a, key_b = create_key(data_dir, "acme"), create_key(data_dir, "globex")
    stack = start_stack(
        data_dir,
        extra_env={
            "SHUTTLE_AUTH": "required",
            "SHUTTLE_TICKET_SECRET": TICKET_SECRET,
            "SHUTTLE_CORS_ORIGINS": "*",
            "SHUTTLE_RATE_LIMIT": "100000/minute",
        },
    )
    yield AuthStack(stack, data_dir, stack.gateway, key_a, key_b)
    stack.stop()


@pytest.fixture(scope="session")
def finished_a(auth_stack: AuthStack) -> str:
    """A completed workflow of tenant acme."""
    with auth_stack.client(auth_stack.key_a) as client:
        created = client.post("/api/v1/tasks", json={"query": "What is 6*7?"}).json()
        workflow_id = str(created["workflow_id"])
        with client.stream("GET", f"/api/v1/stream/sse?workflow_id={workflow_id}") as response:
            assert response.status_code == 200
            for _ in response.iter_lines():
                pass
    return workflow_id


@pytest.fixture
def gateway_server(
    auth_stack: AuthStack, request: pytest.FixtureRequest
) -> Iterator[GatewayServer]:
    """An in-process gateway over the shared backends; `indirect` params override settings."""
    overrides = getattr(request, "param", {})
    server = GatewayServer(auth_stack.settings(**overrides)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def events_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EventsProcess]:
    """An events service of the module's own, as a process it may kill and restart."""
    process = EventsProcess(Path(tmp_path_factory.mktemp("events"))).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def browser_tools() -> Path:
    """The node packages of tests/gateway/browser (.ci/run installs them; so does this)."""
    if not (BROWSER_DIR / "node_modules" / ".bin" / "protoc-gen-es").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=BROWSER_DIR, check=True)
    return BROWSER_DIR


@pytest.fixture(scope="session")
def browser_clients(browser_tools: Path) -> Path:
    """connect-web clients generated from proto/ with protoc-gen-es."""
    plugin = BROWSER_DIR / "node_modules" / ".bin" / "protoc-gen-es"
    out = BROWSER_DIR / "gen"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    subprocess.run(
        [
            sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_DIR}",
            f"--plugin=protoc-gen-es={plugin}", f"--es_out={out}", "--es_opt=target=ts",
            *[str(p) for p in sorted((PROTO_DIR / "shuttle" / "v1").glob("*.proto"))],
        ],
        check=True,
    )  # fmt: skip
    return BROWSER_DIR


def drive(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        ["node", str(BROWSER_DIR / "drive.mjs"), *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


HOOKS = """
hooks:
  - kind: approval
    tools: ["calculator"]
    risk_level: HIGH
"""


def start_gated(data_dir: Path) -> tuple[Stack, str, str]:
    """A stack whose calculator needs a human's approval, and keys of two tenants."""
    hooks = data_dir / "hooks.yaml"
    hooks.write_text(HOOKS)
    key_a, key_b = create_key(data_dir, "acme"), create_key(data_dir, "globex")
    stack = start_stack(
        data_dir,
        extra_env={
            "SHUTTLE_AUTH": "required",
            "SHUTTLE_TICKET_SECRET": TICKET_SECRET,
            "SHUTTLE_TOOL_HOOKS_FILE": str(hooks),
        },
    )
    return stack, key_a, key_b


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str, str]]:
    """A stack whose calculator needs approval (one per test module), and two tenants' keys."""
    stack, key_a, key_b = start_gated(Path(tmp_path_factory.mktemp("gated")))
    yield stack, key_a, key_b
    stack.stop()
