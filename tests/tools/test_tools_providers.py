"""Remote tools: a ToolProvider in Node.js, and MCP servers over stdio and streamable HTTP.

Each is wired through `build()` from settings, as `python -m services.tools` does, so the
hooks of a real deployment (a hooks file, the audit log) apply to them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import httpx
import pytest
from sqlalchemy import select

from services.tools.__main__ import build
from services.tools.db import tool_audit
from shuttle.db import create_engine
from shuttle.settings import McpServerConfig, Settings
from shuttle.v1 import tools_pb2, tools_pb2_grpc
from tests.support.stack import free_ports

if TYPE_CHECKING:
    from shuttle.v1.tools_pb2_grpc import ToolServiceAsyncStub

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
NODE_DIR = HERE / "node_provider"
MCP_SERVER = HERE / "mcp_server.py"
HOOKS = """
hooks:
  - kind: deny
    tools: ["*_fail"]
    tenants: [locked]
    reason: failing tools are off for this tenant
  - kind: redact
    tools: ["node_*", "mcp_*"]
    pattern: "SECRET"
"""


@pytest.fixture(scope="module")
def node_provider() -> Iterator[str]:
    if shutil.which("node") is None:
        pytest.fail("node is required for the Node.js provider test (see .ci/run)")
    if not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, timeout=600
        )
    process = subprocess.Popen(
        ["node", str(NODE_DIR / "provider.js")], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("PORT "), line
    try:
        yield f"127.0.0.1:{line.split()[1]}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def mcp_http_url() -> Iterator[str]:
    [port] = free_ports(1)
    process = subprocess.Popen(
        [sys.executable, str(MCP_SERVER), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(200):
            try:
                httpx.get(url, timeout=0.5)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


async def serve(
    tmp_path: Path, **settings: Any
) -> AsyncIterator[tuple[ToolServiceAsyncStub, Settings]]:
    hooks = tmp_path / "hooks.yaml"
    hooks.write_text(HOOKS)
    config = Settings(data_dir=tmp_path, database_url="", tool_hooks_file=hooks, **settings)
    service = await build(config)
    port = await service.start("127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield tools_pb2_grpc.ToolServiceStub(channel), config
    finally:
        await channel.close()
        await service.stop(grace=0)


CALL_IDS = itertools.count(8)


async def execute(
    stub: ToolServiceAsyncStub,
    tool: str,
    args: dict[str, Any],
    tenant: str = "acme",
    call_id: str = "",
) -> tools_pb2.ExecuteResponse:
    # Each a new call: a repeated call id is answered from the ledger.
    return await stub.Execute(
        tools_pb2.ExecuteRequest(
            tool_name=tool,
            arguments_json=json.dumps(args),
            tenant_id=tenant,
            workflow_id="wf-remote",
            call_id=call_id or f"call-{next(CALL_IDS)}",
        )
    )


async def audit_rows(settings: Settings, count: int) -> list[tuple[str, str, str]]:
    """The audit log once it holds `count` rows: they are written just after the results."""
    engine = create_engine(settings.sqlalchemy_url)
    deadline = time.monotonic() + 30
    try:
        while True:
            async with engine.connect() as conn:
                rows = (await conn.execute(select(tool_audit).order_by(tool_audit.c.id))).all()
            if len(rows) >= count or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
    finally:
        await engine.dispose()
    return [(row.tenant_id, row.tool_name, row.outcome) for row in rows]


@pytest.fixture
async def node_stub(
    tmp_path: Path, node_provider: str
) -> AsyncIterator[tuple[ToolServiceAsyncStub, Settings]]:
    async for served in serve(tmp_path, tool_providers={"node": node_provider}):
        yield served


async def test_node_provider_tools_join_the_catalog(
    node_stub: tuple[ToolServiceAsyncStub, Settings],
) -> None:
    stub, _ = node_stub
    listed = await stub.ListTools(tools_pb2.ListToolsRequest(category="node"))
    specs = {tool.name: tool for tool in listed.tools}
    assert set(specs) == {"node_reverse", "node_fail"}
    assert specs["node_reverse"].flags.read_only is True
    assert specs["node_reverse"].flags.timeout_seconds == 5
    assert json.loads(specs["node_reverse"].parameters_json)["required"] == ["text"]


async def test_node_provider_runs_behind_the_hooks(
    node_stub: tuple[ToolServiceAsyncStub, Settings],
) -> None:
    stub, settings = node_stub
    ok = await execute(stub, "node_reverse", {"text": "TERCES olleh"}, call_id="call-7")
    # The provider saw the call's context; the redact hook rewrote its output.
    assert ok.observation == "hello [redacted] (call call-7 of acme)"
    # Half a surrogate pair goes on escaped, as the model sent it. The provider echoes it
    # back as bytes that are not UTF-8, which protobuf cannot read.
    halved = await execute(stub, "node_reverse", {"text": "ab\ud83d"})
    assert halved.error == (
        "node_reverse: the tool provider 'node' sent a reply that is not a valid "
        "ProviderExecuteResponse (string fields must be UTF-8)"
    )
    invalid = await execute(stub, "node_reverse", {"text": 5})
    assert invalid.error and "invalid arguments for 'node_reverse'" in invalid.observation
    failed = await execute(stub, "node_fail", {})
    assert failed.error == "node_fail: the upstream API rejected the request"
    locked = await execute(stub, "node_fail", {}, tenant="locked")
    assert locked.blocked and locked.block_reason == "failing tools are off for this tenant"
    assert await audit_rows(settings, 4) == [
        ("acme", "node_reverse", "ok"),
        ("acme", "node_reverse", "error"),
        ("acme", "node_fail", "error"),
        ("locked", "node_fail", "blocked"),
    ]


async def check_mcp(stub: ToolServiceAsyncStub, settings: Settings) -> None:
    listed = await stub.ListTools(tools_pb2.ListToolsRequest(names=["mcp_add", "mcp_fail"]))
    assert {tool.name for tool in listed.tools} == {"mcp_add", "mcp_fail"}
    assert all(tool.category == "mcp:demo" for tool in listed.tools)
    added = await execute(stub, "mcp_add", {"a": 40, "b": 2})
    assert added.observation == "42" and not added.error
    wrong = await execute(stub, "mcp_add", {"a": "forty"})
    assert wrong.error and "invalid arguments for 'mcp_add'" in wrong.observation
    failed = await execute(stub, "mcp_fail", {"reason": "SECRET down"})
    assert failed.error and "mcp_fail: [redacted] down" in failed.observation
    blocked = await execute(stub, "mcp_fail", {"reason": "x"}, tenant="locked")
    assert blocked.blocked
    assert [row[2] for row in await audit_rows(settings, 3)] == ["ok", "error", "blocked"]


async def test_mcp_server_over_stdio(tmp_path: Path) -> None:
    server = McpServerConfig(command=sys.executable, args=[str(MCP_SERVER)])
    async for stub, settings in serve(tmp_path, mcp_servers={"demo": server}):
        await check_mcp(stub, settings)


async def test_mcp_server_over_streamable_http(tmp_path: Path, mcp_http_url: str) -> None:
    async for stub, settings in serve(
        tmp_path, mcp_servers={"demo": McpServerConfig(url=mcp_http_url)}
    ):
        await check_mcp(stub, settings)


async def test_an_unreachable_provider_does_not_stop_the_service(tmp_path: Path) -> None:
    [port] = free_ports(1)
    async for stub, _ in serve(tmp_path, tool_providers={"gone": f"127.0.0.1:{port}"}):
        listed = await stub.ListTools(tools_pb2.ListToolsRequest())
        assert "calculator" in {tool.name for tool in listed.tools}
        assert (await execute(stub, "calculator", {"expression": "1+1"})).observation == "2"
