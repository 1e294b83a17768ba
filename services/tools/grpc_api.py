"""gRPC adapter: shuttle.v1.ToolService on top of ToolHost (protobuf ⇄ domain only)."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import grpc

from services.tools.catalog import ToolSpec
from services.tools.host import ToolCallRequest, ToolCallResult, ToolHost
from shuttle.grpc_server import Context
from shuttle.v1 import tools_pb2, tools_pb2_grpc

SERVICE_NAME: str = tools_pb2.DESCRIPTOR.services_by_name["ToolService"].full_name


def spec_to_proto(spec: ToolSpec, timeout_seconds: float) -> tools_pb2.ToolSpec:
    """A catalog entry on the wire; `timeout_seconds` is the effective timeout."""
    return tools_pb2.ToolSpec(
        name=spec.name,
        description=spec.description,
        parameters_json=json.dumps(spec.parameters, ensure_ascii=False),
        category=spec.category,
        flags=tools_pb2.ToolFlags(
            read_only=spec.read_only,
            requires_approval=spec.requires_approval,
            cacheable=spec.cacheable,
            timeout_seconds=timeout_seconds,
        ),
    )


def request_from_proto(request: tools_pb2.ExecuteRequest) -> ToolCallRequest:
    return ToolCallRequest(
        tool_name=request.tool_name,
        arguments_json=request.arguments_json,
        call_id=request.call_id,
        workflow_id=request.workflow_id,
        tenant_id=request.tenant_id,
        agent_id=request.agent_id,
    )


def result_to_proto(result: ToolCallResult) -> tools_pb2.ExecuteResponse:
    return tools_pb2.ExecuteResponse(
        call_id=result.call_id,
        observation=result.observation,
        error=result.error,
        blocked=result.blocked,
        block_reason=result.block_reason,
        truncated=result.truncated,
        artifacts=[
            tools_pb2.Artifact(
                name=artifact.name,
                mime_type=artifact.mime_type,
                size_bytes=artifact.size_bytes,
                uri=artifact.uri,
            )
            for artifact in result.artifacts
        ],
        duration_ms=result.duration_ms,
    )


async def _unimplemented(context: Any, method: str, what: str) -> NoReturn:
    await context.abort(
        grpc.StatusCode.UNIMPLEMENTED,
        f"ToolService.{method} is not implemented yet: {what} are not available in this version",
    )
    raise AssertionError("context.abort() returned")  # abort always raises


class ToolServiceServicer(tools_pb2_grpc.ToolServiceServicer):
    """Thin grpc.aio servicer: tool failures travel in ExecuteResponse, not as RPC errors."""

    def __init__(self, host: ToolHost) -> None:
        self._host = host

    async def ListTools(
        self, request: tools_pb2.ListToolsRequest, context: Context
    ) -> tools_pb2.ListToolsResponse:
        specs = self._host.list_tools(
            tenant_id=request.tenant_id,
            category=request.category,
            names=list(request.names),
            read_only_only=request.read_only_only,
        )
        return tools_pb2.ListToolsResponse(
            tools=[spec_to_proto(spec, self._host.timeout_for(spec)) for spec in specs]
        )

    async def Execute(
        self, request: tools_pb2.ExecuteRequest, context: Context
    ) -> tools_pb2.ExecuteResponse:
        if not request.tool_name.strip():
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "ExecuteRequest.tool_name is required"
            )
        result = await self._host.execute(request_from_proto(request))
        return result_to_proto(result)

    async def DecideApproval(
        self, request: tools_pb2.DecideApprovalRequest, context: Context
    ) -> tools_pb2.Approval:
        await _unimplemented(context, "DecideApproval", "human approvals")

    async def ListApprovals(
        self, request: tools_pb2.ListApprovalsRequest, context: Context
    ) -> tools_pb2.ListApprovalsResponse:
        await _unimplemented(context, "ListApprovals", "human approvals")
