"""PlannerService over gRPC. Every RPC is declared in the contract; none is built yet, and
each says so rather than returning an empty answer a caller might trust."""

from __future__ import annotations

from typing import NoReturn

import grpc

from shuttle.grpc_server import Context
from shuttle.v1 import planner_pb2_grpc


async def _not_yet(context: Context, rpc: str, what: str) -> NoReturn:
    await context.abort(
        grpc.StatusCode.UNIMPLEMENTED, f"PlannerService.{rpc} ({what}) is not implemented yet"
    )
    raise AssertionError("unreachable")


class PlannerServicer(planner_pb2_grpc.PlannerServiceServicer):
    async def StructuredCall(self, request: object, context: Context) -> NoReturn:
        await _not_yet(context, "StructuredCall", "schema-shaped output from a model")

    async def SelectTools(self, request: object, context: Context) -> NoReturn:
        await _not_yet(context, "SelectTools", "tool selection")

    async def Plan(self, request: object, context: Context) -> NoReturn:
        await _not_yet(context, "Plan", "DAG planning")

    async def AnalyzePlan(self, request: object, context: Context) -> NoReturn:
        await _not_yet(context, "AnalyzePlan", "plan analysis")

    async def Route(self, request: object, context: Context) -> NoReturn:
        await _not_yet(context, "Route", "complexity routing")
