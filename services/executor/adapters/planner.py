"""Routing, tool selection, DAG plans and plan analysis through PlannerService."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import grpc

from services.executor.dag.plan import PlannedRound
from services.executor.dag.ports import PlanningFailed
from services.executor.ports import MODES, Route, Selection, ToolDefinition
from shuttle.grpc_client import tenant_metadata
from shuttle.plans import Analysis, PlanStep, StepResult
from shuttle.usage import usage_from_proto
from shuttle.v1 import common_pb2, planner_pb2, planner_pb2_grpc

log = logging.getLogger(__name__)

ROUTE_TIMEOUT_SECONDS = 30.0
SELECT_TIMEOUT_SECONDS = 30.0
PLAN_TIMEOUT_SECONDS = 300.0
# The planner sees ~80 characters per tool: a name and a one-line description, no schema.
DESCRIPTION_CHARS = 80


def _summaries(tools: Sequence[ToolDefinition]) -> list[planner_pb2.ToolSummary]:
    """The compact catalog the planner reads: each tool's name and first description line."""
    return [
        planner_pb2.ToolSummary(
            name=t.name, description=(t.description.splitlines() or [""])[0][:DESCRIPTION_CHARS]
        )
        for t in tools
    ]


class PlannerClient:
    """The planner as the router, the tool selector and the DAG planner: a planner that
    cannot answer never fails a run where the run can do without it (STANDARD mode, every
    tool offered, the round's results standing)."""

    def __init__(
        self, channel: grpc.aio.Channel, route_timeout_seconds: float = ROUTE_TIMEOUT_SECONDS
    ) -> None:
        self._stub = planner_pb2_grpc.PlannerServiceStub(channel)
        self._route_timeout = route_timeout_seconds

    async def route(
        self,
        workflow_id: str,
        query: str,
        requested_mode: str,
        tenant_id: str = "",
        within_seconds: float | None = None,
    ) -> Route:
        if requested_mode in MODES:
            return Route(requested_mode, 0.0)
        timeout = self._route_timeout
        if within_seconds is not None:
            timeout = max(0.0, min(timeout, within_seconds))
        try:
            reply = await self._stub.Route(
                planner_pb2.RouteRequest(workflow_id=workflow_id, query=query),
                timeout=timeout,
                metadata=tenant_metadata(tenant_id),
            )
        except grpc.aio.AioRpcError as exc:
            log.info("routing unavailable, using STANDARD: %s", exc.details())
            return Route("STANDARD", 0.0)
        mode = common_pb2.Mode.Name(reply.mode).removeprefix("MODE_")
        return Route(
            mode if mode in MODES else "STANDARD",
            reply.estimated_complexity,
            usage_from_proto(reply.usage),
        )

    async def select(
        self, workflow_id: str, query: str, tools: Sequence[ToolDefinition], max_tools: int
    ) -> Selection:
        request = planner_pb2.SelectToolsRequest(
            workflow_id=workflow_id,
            query=query,
            tools=_summaries(tools),
            max_tools=max_tools,
        )
        try:
            response = await self._stub.SelectTools(request, timeout=SELECT_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError as exc:
            log.warning(
                "tool selection unavailable, offering every tool",
                extra={"workflow_id": workflow_id, "code": exc.code().name},
            )
            return Selection(None)
        usage = usage_from_proto(response.usage)
        if response.fell_back:
            return Selection(None, usage)
        return Selection(list(response.tool_names), usage)

    async def plan(
        self, workflow_id: str, query: str, tools: Sequence[ToolDefinition], context: str
    ) -> PlannedRound:
        request = planner_pb2.PlanRequest(
            workflow_id=workflow_id,
            query=query,
            tools=_summaries(tools),
            context=context,
        )
        try:
            reply = await self._stub.Plan(request, timeout=PLAN_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError as exc:
            raise PlanningFailed(f"planner: {exc.details()}") from exc
        steps = tuple(
            PlanStep(s.id, s.task, tuple(s.dependencies), s.tool_hint, s.model_hint)
            for s in reply.steps
        )
        return PlannedRound(steps, usage_from_proto(reply.usage), tuple(reply.repairs))

    async def analyze(
        self, workflow_id: str, query: str, results: Sequence[StepResult]
    ) -> Analysis | None:
        request = planner_pb2.AnalyzePlanRequest(
            workflow_id=workflow_id,
            query=query,
            results=[
                planner_pb2.StepResult(
                    step_id=r.step_id, task=r.task, result=r.result, failed=r.failed
                )
                for r in results
            ],
        )
        try:
            reply = await self._stub.AnalyzePlan(request, timeout=PLAN_TIMEOUT_SECONDS)
        except grpc.aio.AioRpcError as exc:
            log.warning(
                "plan analysis unavailable; the round's results stand",
                extra={"workflow_id": workflow_id, "code": exc.code().name},
            )
            return None
        return Analysis(
            reply.achieved,
            reply.confidence,
            reply.answer,
            reply.reasoning,
            usage_from_proto(reply.usage),
        )
