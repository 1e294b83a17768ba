"""`python -m services.executor`: the ExecutorService process."""

from __future__ import annotations

import logging

from services.executor.adapters.events import (
    GrpcRunLeases,
    GrpcRunLog,
    GrpcWorkflowRegistry,
    run_sink,
)
from services.executor.adapters.planner import PlannerClient
from services.executor.adapters.tools import ToolClient
from services.executor.adapters.tracing import TracedTools
from services.executor.commands.feed import CommandFeed
from services.executor.dag.steps import StepLimits
from services.executor.dag.team import TeamSettings
from services.executor.engine.settings import AgentSettings
from services.executor.grpc_api import CALLER_ROLES, ExecutorServicer
from services.executor.lease import Leasing, replica_id
from services.executor.runs import EmitterSettings, RunManager
from shuttle.events_client import EventsClient
from shuttle.grpc_auth import EXECUTOR, ChannelAuth, ServerAuth
from shuttle.grpc_client import open_channel
from shuttle.grpc_server import GrpcService
from shuttle.llm.factory import build_registry
from shuttle.process import main
from shuttle.settings import Settings
from shuttle.v1 import executor_pb2, executor_pb2_grpc

log = logging.getLogger("executor")


async def build(settings: Settings) -> GrpcService:
    auth = ServerAuth.from_settings(settings)
    presented = ChannelAuth.for_component(settings, EXECUTOR)
    models = build_registry(settings).traced()
    llm = models.default
    if settings.uses_demo_model:
        log.info("LLM: the offline DEMO model (deterministic, arithmetic only)")
    else:
        where = settings.models_file or settings.openai_base_url
        log.info("LLM: %s from %s", llm.model or "endpoint default", where)
    events_channel = open_channel(settings.grpc_target("events"), presented)
    tools_channel = open_channel(settings.grpc_target("tools"), presented)
    planner_channel = open_channel(settings.grpc_target("planner"), presented)
    # The command feed and the runs' appends are streams for the life of the process that
    # belong to no run: untraced, they hold no span and no tracing interceptor (each batch
    # carries its run's trace itself).
    streams_channel = open_channel(settings.grpc_target("events"), presented, traced=False)
    events = EventsClient(
        events_channel,
        streams_channel=streams_channel,
        retry_seconds=settings.events_retry_seconds,
    )
    planner = PlannerClient(planner_channel)
    tools = TracedTools(
        ToolClient(tools_channel, settings.tool_timeout_seconds, settings.approval_timeout_seconds)
    )
    runs = RunManager(
        registry=GrpcWorkflowRegistry(events),
        sinks=lambda workflow_id, tenant_id, epoch: run_sink(
            events, workflow_id, tenant_id, lease_epoch=epoch
        ),
        tools=tools,
        llm=llm,
        settings=AgentSettings.from_settings(settings),
        router=planner,
        commands=CommandFeed(events),
        selector=planner,
        emitter=EmitterSettings(settings.events_batch_max, settings.events_linger_ms / 1000),
        planner=planner,
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
        leasing=Leasing(
            GrpcRunLeases(events),
            replica_id(),
            settings.run_lease_seconds,
            takeover_poll_seconds=settings.run_takeover_poll_seconds,
            max_takeovers=settings.run_max_takeovers,
        ),
        run_log=GrpcRunLog(events),
    )

    # Runs this replica's peers lost or handed over are taken over here from now on.
    runs.start_takeovers()

    async def hand_runs_over() -> None:
        # At once, not after the grace period: another replica goes on with each run.
        await runs.shutdown()

    async def close_connections() -> None:
        await events.close()
        for channel in (events_channel, streams_channel, tools_channel, planner_channel):
            await channel.close()
        await models.close()

    return GrpcService(
        name="executor",
        service_names=[executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"].full_name],
        register=lambda server: executor_pb2_grpc.add_ExecutorServiceServicer_to_server(
            ExecutorServicer(runs, events, max_budget_tokens=settings.max_budget_tokens), server
        ),
        on_stopping=(hand_runs_over,),
        on_stop=(close_connections,),
        auth=auth,
        roles=CALLER_ROLES,
    )


if __name__ == "__main__":
    main("executor", build)
