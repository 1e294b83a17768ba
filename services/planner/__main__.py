"""`python -m services.planner`: the PlannerService process."""

from __future__ import annotations

from services.planner.grpc_api import PlannerServicer
from shuttle.grpc_server import GrpcService
from shuttle.process import main
from shuttle.settings import Settings
from shuttle.v1 import planner_pb2, planner_pb2_grpc


async def build(settings: Settings) -> GrpcService:
    return GrpcService(
        name="planner",
        service_names=[planner_pb2.DESCRIPTOR.services_by_name["PlannerService"].full_name],
        register=lambda server: planner_pb2_grpc.add_PlannerServiceServicer_to_server(
            PlannerServicer(), server
        ),
    )


if __name__ == "__main__":
    main("planner", build)
