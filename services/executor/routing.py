"""Which engine a task gets: SIMPLE and STANDARD run the ReAct loop, COMPLEX a DAG."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import grpc

from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, planner_pb2, planner_pb2_grpc

log = logging.getLogger(__name__)

MODES = ("SIMPLE", "STANDARD", "COMPLEX")


@dataclass(frozen=True)
class Route:
    mode: str
    estimated_complexity: float


class Router(Protocol):
    async def route(
        self, workflow_id: str, query: str, requested_mode: str, tenant_id: str = ""
    ) -> Route:
        """The user's mode when they forced one, else the planner's estimate."""
        ...


class GrpcRouter:
    """Asks PlannerService.Route; a planner that cannot answer means STANDARD, never a
    failed run."""

    def __init__(self, stub: planner_pb2_grpc.PlannerServiceAsyncStub) -> None:
        self._stub = stub

    async def route(
        self, workflow_id: str, query: str, requested_mode: str, tenant_id: str = ""
    ) -> Route:
        if requested_mode in MODES:
            return Route(requested_mode, 0.0)
        try:
            reply = await self._stub.Route(
                planner_pb2.RouteRequest(workflow_id=workflow_id, query=query),
                timeout=30,
                metadata=tenant_metadata(tenant_id),
            )
        except grpc.aio.AioRpcError as exc:
            log.info("routing unavailable, using STANDARD: %s", exc.details())
            return Route("STANDARD", 0.0)
        mode = common_pb2.Mode.Name(reply.mode).removeprefix("MODE_")
        return Route(mode if mode in MODES else "STANDARD", reply.estimated_complexity)
