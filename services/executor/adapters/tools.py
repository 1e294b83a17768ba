"""The tools service as the engine's tool port; RPC failures become error outcomes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache

import grpc

from services.executor.ports import ToolDefinition
from shuttle.tool_calls import Artifact, DataProcessed, ToolCall, ToolOutcome
from shuttle.v1 import tools_pb2, tools_pb2_grpc

# Distinct tool definitions kept decoded; a catalog rarely holds more than a few dozen.
TOOL_DEFINITIONS_KEPT = 1024


@lru_cache(maxsize=TOOL_DEFINITIONS_KEPT)
def _tool_definition(name: str, description: str, parameters_json: str) -> ToolDefinition:
    """Decoded once per distinct definition and shared: every run lists the catalog, and a
    decoded copy per run was much of what an in-flight run held."""
    return ToolDefinition(name, description, json.loads(parameters_json or "{}"))


class ToolClient:
    """ToolService.ListTools and Execute, with each tool's own deadline."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        timeout_seconds: float,
        approval_timeout_seconds: float = 1800.0,
    ) -> None:
        self._stub = tools_pb2_grpc.ToolServiceStub(channel)
        # Headroom over the tool's own limit so the tool service reports its timeout first.
        self._deadline = timeout_seconds + 5.0
        self._approval_wait = approval_timeout_seconds
        # Per tenant and tool, from ListTools: the tool's own timeout, and whether a human
        # must approve first (approval gates may apply to some tenants only).
        self._deadlines: dict[tuple[str, str], float] = {}

    async def list_tools(self, tenant_id: str) -> Sequence[ToolDefinition]:
        response = await self._stub.ListTools(tools_pb2.ListToolsRequest(tenant_id=tenant_id))
        for t in response.tools:
            deadline = (t.flags.timeout_seconds or self._deadline - 5.0) + 5.0
            if t.flags.requires_approval:
                deadline += self._approval_wait
            self._deadlines[(tenant_id, t.name)] = deadline
        return [_tool_definition(t.name, t.description, t.parameters_json) for t in response.tools]

    async def execute(self, call: ToolCall) -> ToolOutcome:
        request = tools_pb2.ExecuteRequest(
            workflow_id=call.workflow_id,
            tenant_id=call.tenant_id,
            call_id=call.call_id,
            tool_name=call.tool_name,
            arguments_json=call.arguments_json,
            agent_id=call.agent_id,
        )
        try:
            response = await self._stub.Execute(
                request,
                timeout=self._deadlines.get((call.tenant_id, call.tool_name), self._deadline),
            )
        except grpc.aio.AioRpcError as exc:
            message = f"tool {call.tool_name} could not run: {exc.code().name}: {exc.details()}"
            return ToolOutcome(observation=message, error=message)
        return ToolOutcome(
            observation=response.observation,
            error=response.error,
            blocked=response.blocked,
            block_reason=response.block_reason,
            truncated=response.truncated,
            duration_ms=response.duration_ms,
            artifacts=tuple(
                Artifact(a.name, a.mime_type, a.size_bytes, a.uri) for a in response.artifacts
            ),
            call_id=response.call_id,
            processed=_processed(response),
        )


def _processed(response: tools_pb2.ExecuteResponse) -> DataProcessed | None:
    if not response.HasField("processed"):
        return None
    p = response.processed
    return DataProcessed(
        operation=p.operation,
        bytes_processed=p.bytes_processed,
        records_processed=p.records_processed if p.HasField("records_processed") else None,
        total_records=p.total_records if p.HasField("total_records") else None,
        processing_stage=p.processing_stage,
    )
