"""Shuttle as an MCP server at /mcp, through the `mcp` SDK's own client against a running
stack with authentication: a task run with progress, tasks read back, approvals decided,
and the keys and tenancy of the rest of the gateway."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from shuttle.v1 import tools_pb2, tools_pb2_grpc
from tests.gateway.conftest import AuthStack
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


@asynccontextmanager
async def mcp_client(gateway: str, key: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{gateway}/mcp", http_client=http)) as client:
        yield client


class Progress:
    """The progress notifications of one call, as the client's ProgressFnT is told them."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, message))


def structured(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if set(content) == {"result"} else content
    [text] = [part for part in result.content if isinstance(part, TextContent)]
    return json.loads(text.text)


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    return " ".join(part.text for part in result.content if isinstance(part, TextContent))


async def test_the_tools_are_listed_with_their_arguments(auth_stack: AuthStack) -> None:
    async with mcp_client(auth_stack.url, auth_stack.key_a) as client:
        listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {"run_task", "get_task", "list_tasks", "decide_approval"}
    assert tools["run_task"].input_schema["required"] == ["query"]
    assert set(tools["decide_approval"].input_schema["properties"]["decision"]["enum"]) == {
        "approved",
        "denied",
    }


async def test_run_task_reports_progress_and_answers_with_the_result(
    auth_stack: AuthStack,
) -> None:
    told = Progress()

    async with mcp_client(auth_stack.url, auth_stack.key_a) as client:
        ran = await client.call_tool("run_task", {"query": "What is 12*7?"}, progress_callback=told)
        task = structured(ran)
        again = structured(await client.call_tool("get_task", {"workflow_id": task["workflow_id"]}))
        listed = structured(await client.call_tool("list_tasks", {"limit": 5}))
    assert task["status"] == "completed" and task["result"] == "[demo model] 12*7 = 84"
    assert task["workflow_id"].startswith("wf-") and task["total_tokens"] > 0
    assert again == task
    assert task["workflow_id"] in [entry["workflow_id"] for entry in listed]
    progress = told.seen
    messages = [message for _, message in progress]
    assert messages[0] == "iteration 1"
    assert "TOOL_INVOKED: calculator: 12*7" in messages and messages[-1] == "answered"
    assert [done for done, _ in progress] == list(range(1, len(progress) + 1))


async def test_refusals_are_tool_errors_that_say_why(auth_stack: AuthStack) -> None:
    async with mcp_client(auth_stack.url, auth_stack.key_a) as client:
        blank = await client.call_tool("run_task", {"query": "  "})
        limit = await client.call_tool("list_tasks", {"limit": 1000})
        missing = await client.call_tool(
            "decide_approval", {"approval_id": "ap-x", "decision": "approved"}
        )
        unknown = await client.call_tool("get_task", {"workflow_id": "wf-missing"})
    assert "query: must not be blank" in error_text(blank)
    assert "limit must be 1 to 100" in error_text(limit)
    assert "404" in error_text(missing) and "404" in error_text(unknown)


async def test_another_tenants_task_is_not_found(auth_stack: AuthStack, finished_a: str) -> None:
    async with mcp_client(auth_stack.url, auth_stack.key_b) as client:
        foreign = await client.call_tool("get_task", {"workflow_id": finished_a})
        listed = structured(await client.call_tool("list_tasks", {}))
    assert "404" in error_text(foreign)
    assert finished_a not in [entry["workflow_id"] for entry in listed]


def test_a_request_without_a_valid_key_is_refused_before_mcp(auth_stack: AuthStack) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    anonymous = httpx.post(f"{auth_stack.url}/mcp", json=hello, headers=headers)
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthenticated"
    forged = httpx.post(
        f"{auth_stack.url}/mcp", json=hello, headers={**headers, "Authorization": "Bearer sk-x"}
    )
    assert forged.status_code == 401
    # The gateway is still up for the next caller.
    assert httpx.get(f"{auth_stack.url}/healthz").status_code == 200


async def pending_approval(stack: Stack, tenant: str) -> str:
    async with stack.channel("tools") as channel:
        tools = tools_pb2_grpc.ToolServiceStub(channel)
        request = tools_pb2.ListApprovalsRequest(tenant_id=tenant, pending_only=True)
        async with asyncio.timeout(30):
            while True:
                found = (await tools.ListApprovals(request)).approvals
                if found:
                    return str(found[0].approval_id)
                await asyncio.sleep(0.05)


async def test_a_task_waiting_on_an_approval_goes_on_once_it_is_decided(
    gated: tuple[Stack, str, str],
) -> None:
    stack, key_a, key_b = gated
    url = stack.gateway
    async with mcp_client(url, key_a) as runner, mcp_client(url, key_a) as reviewer:
        running = asyncio.create_task(runner.call_tool("run_task", {"query": "What is 5*5?"}))
        approval_id = await pending_approval(stack, "acme")
        async with mcp_client(url, key_b) as stranger:
            foreign = await stranger.call_tool(
                "decide_approval", {"approval_id": approval_id, "decision": "denied"}
            )
        decided = structured(
            await reviewer.call_tool(
                "decide_approval", {"approval_id": approval_id, "decision": "approved"}
            )
        )
        task = structured(await running)
    assert "404" in error_text(foreign)
    assert decided == {
        "approval_id": approval_id,
        "workflow_id": task["workflow_id"],
        "status": "approved",
    }
    assert task["status"] == "completed" and "25" in task["result"]
