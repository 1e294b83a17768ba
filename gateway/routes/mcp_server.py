"""Shuttle as an MCP server: Streamable HTTP at `/mcp` (the `mcp` SDK's MCPServer), behind
the gateway's API keys, tenancy and rate limit, so other agents can hand Shuttle a task.

Tools: `run_task` (runs a task to its end, sending a progress notification for each step
of its log, and answers with the result and the workflow id), `get_task`, `list_tasks`,
`decide_approval`. Each call acts as the tenant of the key that made the HTTP request.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal

import grpc
from fastapi import FastAPI, Request
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.backends import Backends, tenant_metadata
from gateway.edge.tenancy import Caller, caller_of
from gateway.errors import ApiError, error_response, from_rpc_error
from gateway.fanout import FanOut
from gateway.routes.common import workflow_of
from gateway.stores.task_index import TaskIndex
from gateway.submit import TaskSpec, submit
from gateway.workflow_status import status_name
from shuttle.envelope import to_json_dict
from shuttle.v1 import tools_pb2

PATH = "/mcp"
CALLER = "shuttle_caller"
ENDED = ("WORKFLOW_COMPLETED", "WORKFLOW_CANCELLED")

INSTRUCTIONS = (
    "Shuttle runs agent tasks: run_task hands it a task and waits for the answer, "
    "reporting each step as progress; get_task and list_tasks read tasks back; "
    "decide_approval approves or denies a tool call a task is waiting on."
)


def _request(ctx: Context) -> tuple[Caller, FastAPI]:
    request: Request = ctx.request_context.request  # type: ignore[assignment]
    return request.state.shuttle_caller, request.app


async def _acting(ctx: Context, work: Callable[[Caller, FastAPI], Any]) -> Any:
    """`work` as the request's caller; the gateway's refusals become tool errors."""
    caller, app = _request(ctx)
    try:
        return await work(caller, app)
    except ApiError as exc:
        raise ToolError(f"{exc.status} {exc.code}: {exc.message}") from None
    except grpc.aio.AioRpcError as exc:
        refused = from_rpc_error(exc)
        raise ToolError(f"{refused.status} {refused.code}: {refused.message}") from None


def _task(record: Any) -> dict[str, Any]:
    return {
        "workflow_id": record.workflow_id,
        "status": status_name(record.status),
        "query": record.query,
        "result": record.result,
        "error": record.error,
        "session_id": record.session_id,
        "total_tokens": record.usage.total_tokens,
        "cost_usd": record.usage.cost_usd,
    }


def _progress_message(event: dict[str, Any]) -> str | None:
    """What a progress notification says of a log event, or None for events it skips."""
    kind, payload = event["type"], event["payload"]
    if kind == "AGENT_THINKING" and payload.get("status") == "start":
        return f"iteration {payload.get('iteration')}"
    if kind in ("TOOL_INVOKED", "TOOL_OBSERVATION", "APPROVAL_REQUESTED", "WORKFLOW_PAUSED"):
        return f"{kind}: {event['message']}"
    if kind == "THREAD_MESSAGE_COMPLETED":
        return "answered"
    return None


async def run_task(
    query: str,
    ctx: Context,
    session_id: str | None = None,
    mode: Literal["simple", "standard", "complex"] | None = None,
) -> dict[str, Any]:
    """Run a task to its end and answer with its result and workflow id. Each step (an
    iteration, a tool call, an approval asked for) is reported as progress while it runs;
    `session_id` continues a conversation."""

    async def work(caller: Caller, app: FastAPI) -> dict[str, Any]:
        if not query.strip():
            raise ApiError(400, "invalid_request", "query: must not be blank")
        state = app.state
        spec = TaskSpec(query=query, session_id=session_id or "", mode=mode or "")
        done = await submit(
            state.backends, state.task_index, state.sessions, caller.tenant_id, caller.key_id, spec
        )
        await _follow(state.fanout, caller.tenant_id, done.workflow_id, ctx)
        return _task(await workflow_of(state.backends, caller.tenant_id, done.workflow_id))

    result: dict[str, Any] = await _acting(ctx, work)
    return result


async def _follow(fanout: FanOut, tenant: str, workflow_id: str, ctx: Context) -> None:
    steps = 0
    chunks = fanout.watch(tenant, workflow_id, 1)
    try:
        async for chunk in chunks:
            for item in chunk.items:
                event = to_json_dict(item.event)
                message = _progress_message(event)
                if message is not None:
                    steps += 1
                    await ctx.report_progress(steps, message=message)
    finally:
        await chunks.aclose()


async def get_task(workflow_id: str, ctx: Context) -> dict[str, Any]:
    """A task's status, result, error, usage and cost."""

    async def work(caller: Caller, app: FastAPI) -> dict[str, Any]:
        return _task(await workflow_of(app.state.backends, caller.tenant_id, workflow_id))

    result: dict[str, Any] = await _acting(ctx, work)
    return result


async def list_tasks(ctx: Context, limit: int = 20) -> list[dict[str, Any]]:
    """The caller's most recent tasks (at most 100), newest first."""

    async def work(caller: Caller, app: FastAPI) -> list[dict[str, Any]]:
        if not 1 <= limit <= 100:
            raise ApiError(400, "invalid_request", f"limit must be 1 to 100, got {limit}")
        index: TaskIndex = app.state.task_index
        entries = await index.recent(caller.tenant_id, limit)
        return [
            {"workflow_id": e.workflow_id, "query": e.query, "created_at": e.created_at.isoformat()}
            for e in entries
        ]

    result: list[dict[str, Any]] = await _acting(ctx, work)
    return result


async def decide_approval(
    approval_id: str,
    decision: Literal["approved", "denied"],
    ctx: Context,
    comment: str = "",
) -> dict[str, Any]:
    """Approve or deny a tool call a task is waiting on; the first decision wins."""

    async def work(caller: Caller, app: FastAPI) -> dict[str, Any]:
        backends: Backends = app.state.backends
        approval = await backends.tools.DecideApproval(
            tools_pb2.DecideApprovalRequest(
                approval_id=approval_id,
                tenant_id=caller.tenant_id,
                decision=decision,
                comment=comment,
                decided_by=caller.key_id,
            ),
            metadata=tenant_metadata(caller.tenant_id),
        )
        return {
            "approval_id": approval.approval_id,
            "workflow_id": approval.workflow_id,
            "status": approval.status,
        }

    result: dict[str, Any] = await _acting(ctx, work)
    return result


class _Authenticated:
    """The MCP endpoint behind the gateway's own authentication and rate limit: a request
    without a valid key is refused before the MCP session sees it."""

    def __init__(self, endpoint: ASGIApp) -> None:
        self._endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            caller = await caller_of(Request(scope, receive))
        except ApiError as exc:
            refusal = error_response(exc.status, exc.code, exc.message, exc.headers)
            await refusal(scope, receive, send)
            return
        scope.setdefault("state", {})[CALLER] = caller
        await self._endpoint(scope, receive, send)


def install_mcp(app: FastAPI) -> Callable[[], AbstractAsyncContextManager[None]]:
    """Serve MCP at /mcp on `app`; returns what runs its sessions during the app's life."""
    server = MCPServer("shuttle", instructions=INSTRUCTIONS)
    for tool in (run_task, get_task, list_tasks, decide_approval):
        server.add_tool(tool)
    made = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        # The gateway's own middleware guards the Host (loopback only without auth).
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    [route] = [r for r in made.routes if getattr(r, "path", "") == PATH]
    endpoint = _Authenticated(route.endpoint)  # type: ignore[attr-defined]
    # An ASGI app as the endpoint: Starlette hands it the request's scope as it is.
    app.router.routes.append(
        Route(PATH, endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    )
    return server.session_manager.run
