"""`python -m services.planner`: the PlannerService process."""

from __future__ import annotations

import logging

from services.planner.grpc_api import CALLER_ROLES, PlannerServicer
from shuttle.events_client import EventsClient
from shuttle.grpc_auth import PLANNER, ChannelAuth, ServerAuth
from shuttle.grpc_client import open_channel
from shuttle.grpc_server import GrpcService
from shuttle.llm.factory import build_registry
from shuttle.process import main
from shuttle.settings import Settings
from shuttle.v1 import planner_pb2, planner_pb2_grpc

log = logging.getLogger("planner")


async def build(settings: Settings) -> GrpcService:
    auth = ServerAuth.from_settings(settings)
    models = build_registry(settings).traced()
    events_channel = open_channel(
        settings.grpc_target("events"), ChannelAuth.for_component(settings, PLANNER)
    )
    events = EventsClient(events_channel, retry_seconds=settings.events_retry_seconds)
    log.info("planner models: %s", ", ".join(models.names))
    return GrpcService(
        name="planner",
        service_names=[planner_pb2.DESCRIPTOR.services_by_name["PlannerService"].full_name],
        register=lambda server: planner_pb2_grpc.add_PlannerServiceServicer_to_server(
            PlannerServicer(models, events), server
        ),
        on_stop=(events_channel.close, models.close),
        auth=auth,
        roles=CALLER_ROLES,
    )


if __name__ == "__main__":
    main("planner", build)
