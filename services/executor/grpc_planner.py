"""Tool selection through PlannerService.SelectTools."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc

from services.executor.ports import ToolDefinition
from shuttle.v1 import planner_pb2, planner_pb2_grpc

log = logging.getLogger(__name__)

SELECT_TIMEOUT_SECONDS = 30.0
# The planner sees ~80 characters per tool: a name and a one-line description, no schema.
DESCRIPTION_CHARS = 80


class GrpcToolSelector:
    def __init__(self, stub: planner_pb2_grpc.PlannerServiceAsyncStub) -> None:
        self._stub = stub

    async def select(
        self, workflow_id: str, query: str, tools: Sequence[ToolDefinition], max_tools: int
    ) -> Sequence[str] | None:
        request = planner_pb2.SelectToolsRequest(
            workflow_id=workflow_id,
            query=query,
            tools=[
                planner_pb2.ToolSummary(
                    name=t.name,
                    description=(t.description.splitlines() or [""])[0][:DESCRIPTION_CHARS],
                )
                for t in tools
            ],
            max_tools=max_tools,
        )
        try:
            response = await self._stub.SelectTools(request, timeout=SELECT_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError as exc:
            log.warning(
                "tool selection unavailable, offering every tool",
                extra={"workflow_id": workflow_id, "code": exc.code().name},
            )
            return None
        if response.fell_back:
            return None
        return list(response.tool_names)
