"""`python -m services.executor`: the ExecutorService process."""

from __future__ import annotations

import logging

import grpc

from services.executor.append_stream import AppendStream
from services.executor.dag.steps import StepLimits
from services.executor.dag.team import TeamSettings
from services.executor.engine.settings import AgentSettings
from services.executor.grpc_api import ExecutorServicer
from services.executor.grpc_clients import (
    GrpcEventSink,
    GrpcRunLeases,
    GrpcToolHost,
    GrpcWorkflowRegistry,
)
from services.executor.grpc_log import GrpcCommandSource
from services.executor.grpc_planner import GrpcDagPlanner, GrpcToolSelector
from services.executor.instrumented import TracedToolHost
from services.executor.lease import Leasing, replica_id
from services.executor.routing import GrpcRouter
from services.executor.runs import EmitterSettings, RunManager
from shuttle.grpc_client import CHANNEL_OPTIONS, open_channel
from shuttle.grpc_server import GrpcService
from shuttle.llm.factory import build_registry
from shuttle.process import main
from shuttle.settings import Settings
from shuttle.v1 import (
    events_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
    planner_pb2_grpc,
    tools_pb2_grpc,
)

log = logging.getLogger("executor")


async def build(settings: Settings) -> GrpcService:
    models = build_registry(settings).traced()
    llm = models.default
    if settings.uses_demo_model:
        log.info("LLM: the offline DEMO model (deterministic, arithmetic only)")
    else:
        where = settings.models_file or settings.openai_base_url
        log.info("LLM: %s from %s", llm.model or "endpoint default", where)
    events_channel = open_channel(settings.grpc_target("events"))
    tools_channel = open_channel(settings.grpc_target("tools"))
    planner_channel = open_channel(settings.grpc_target("planner"))
    # The command feed and the runs' appends are streams for the life of the process that
    # belong to no run: untraced, they hold no span and no interceptor (each batch carries
    # its run's trace itself).
    feeds_channel = grpc.aio.insecure_channel(
        settings.grpc_target("events"), options=CHANNEL_OPTIONS
    )
    feeds = events_pb2_grpc.EventServiceStub(feeds_channel)
    appends = AppendStream(feeds)
    events = events_pb2_grpc.EventServiceStub(events_channel)
    planner = planner_pb2_grpc.PlannerServiceStub(planner_channel)
    tools = TracedToolHost(
        GrpcToolHost(
            tools_pb2_grpc.ToolServiceStub(tools_channel),
            settings.tool_timeout_seconds,
            settings.approval_timeout_seconds,
        )
    )
    runs = RunManager(
        registry=GrpcWorkflowRegistry(events),
        sinks=lambda workflow_id, tenant_id: GrpcEventSink(events, workflow_id, tenant_id, appends),
        tools=tools,
        llm=llm,
        settings=AgentSettings.from_settings(settings),
        router=GrpcRouter(planner),
        commands=GrpcCommandSource(feeds),
        selector=GrpcToolSelector(planner),
        emitter=EmitterSettings(
            settings.events_batch_max,
            settings.events_retry_seconds,
            settings.events_linger_ms / 1000,
        ),
        planner=GrpcDagPlanner(planner),
        models=models,
        team=TeamSettings(
            max_parallel=settings.dag_max_parallel,
            max_rounds=settings.dag_max_rounds,
            confidence_threshold=settings.dag_confidence_threshold,
        ),
        step_limits=StepLimits(
            max_iterations=settings.dag_step_max_iterations,
            timeout_seconds=settings.dag_step_timeout_seconds,
        ),
        leasing=Leasing(GrpcRunLeases(events), replica_id(), settings.run_lease_seconds),
    )

    async def finish_runs() -> None:
        await runs.shutdown(settings.shutdown_grace_seconds)

    async def close_connections() -> None:
        await appends.close()
        for channel in (events_channel, feeds_channel, tools_channel, planner_channel):
            await channel.close()
        await models.close()

    return GrpcService(
        name="executor",
        service_names=[executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name],
        register=lambda server: executor_pb2_grpc.add_ExecutorServiceServicer_to_server(
            ExecutorServicer(runs, events, events_retry_seconds=settings.events_retry_seconds),
            server,
        ),
        on_stop=(finish_runs, close_connections),
    )


if __name__ == "__main__":
    main("executor", build)
