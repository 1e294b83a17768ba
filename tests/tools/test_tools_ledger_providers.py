"""Providers receive the call's idempotency key ("<workflow_id>/<call_id>"): a ToolProvider
in `ProviderExecuteRequest.idempotency_key`, an MCP server in `tools/call`'s `_meta`. With
the ledger in front, a repeated call reaches neither again."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from services.tools.__main__ import build
from shuttle.settings import McpServerConfig, Settings
from shuttle.v1 import tool_provider_pb2, tool_provider_pb2_grpc, tools_pb2
from tests.tools.ledger_support import request, stub_for

if TYPE_CHECKING:
    from shuttle.v1.tools_pb2_grpc import ToolServiceAsyncStub

MCP_SERVER = Path(__file__).with_name("mcp_server.py")
OPEN_ARGS = '{"type": "object", "properties": {"note": {"type": "string"}}}'


class CountingProvider(tool_provider_pb2_grpc.ToolProviderServicer):
    """A ToolProvider whose one tool counts its calls per idempotency key."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def ListTools(
        self, request: tool_provider_pb2.ProviderListToolsRequest, context: Any
    ) -> tool_provider_pb2.ProviderListToolsResponse:
        return tool_provider_pb2.ProviderListToolsResponse(
            tools=[
                tools_pb2.ToolSpec(
                    name="py_counted", description="Counts its calls.", parameters_json=OPEN_ARGS
                )
            ]
        )

    async def Execute(
        self, request: tool_provider_pb2.ProviderExecuteRequest, context: Any
    ) -> tool_provider_pb2.ProviderExecuteResponse:
        self.calls[request.idempotency_key] += 1
        number = self.calls[request.idempotency_key]
        return tool_provider_pb2.ProviderExecuteResponse(
            output=f"key {request.idempotency_key!r} call #{number}"
        )


@pytest.fixture
async def provider() -> AsyncIterator[tuple[CountingProvider, str]]:
    servicer = CountingProvider()
    server = grpc.aio.server()
    tool_provider_pb2_grpc.add_ToolProviderServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=0)


@asynccontextmanager
async def serving(tmp_path: Path, **settings: Any) -> AsyncIterator[ToolServiceAsyncStub]:
    service = await build(Settings(data_dir=tmp_path, database_url="", **settings))
    port = await service.start("127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield stub_for(channel)
    finally:
        await service.stop(grace=0)


async def test_a_tool_provider_gets_the_key_and_a_repeat_does_not_reach_it(
    tmp_path: Path, provider: tuple[CountingProvider, str]
) -> None:
    counting, target = provider
    async with serving(tmp_path, tool_providers={"py": target}) as stub:
        first = await stub.Execute(request("py_counted", {"note": "x"}, "c1"))
        assert first.observation == "key 'wf-ledger/c1' call #1", first.observation
        assert await stub.Execute(request("py_counted", {"note": "x"}, "c1")) == first
        await stub.Execute(request("py_counted", {"note": "x"}, "c2"))
        adhoc = await stub.Execute(request("py_counted", {}, "", workflow_id=""))
    assert adhoc.observation == "key '' call #1"
    assert counting.calls == {"wf-ledger/c1": 1, "wf-ledger/c2": 1, "": 1}


async def test_an_mcp_server_gets_the_key_in_meta(tmp_path: Path) -> None:
    server = McpServerConfig(command=sys.executable, args=[str(MCP_SERVER)])
    async with serving(tmp_path, mcp_servers={"demo": server}) as stub:
        first = await stub.Execute(request("mcp_keyed", {"note": "x"}, "c1"))
        assert first.observation == "x: key 'wf-ledger/c1' call #1", first.observation
        assert await stub.Execute(request("mcp_keyed", {"note": "x"}, "c1")) == first
        other = await stub.Execute(request("mcp_keyed", {"note": "y"}, "c2"))
        adhoc = await stub.Execute(request("mcp_keyed", {"note": "z"}, "", workflow_id=""))
    assert other.observation == "y: key 'wf-ledger/c2' call #1"
    assert adhoc.observation == "z: key '' call #1"
