"""The internal credential on the four real services, each built as its process builds it and
served on port 0: nothing gets past without it but a health check, and each component
reaches only the methods its role is allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.events.__main__ import build as build_events
from services.events.wire import SERVICE
from services.executor.__main__ import build as build_executor
from services.planner.__main__ import build as build_planner
from services.tools.__main__ import build as build_tools
from shuttle.grpc_auth import (
    EXECUTOR,
    GATEWAY,
    NO_CREDENTIAL,
    PLANNER,
    TOOLS,
    ChannelAuth,
    credential,
    method_roles,
)
from shuttle.grpc_client import open_channel
from shuttle.grpc_server import GrpcService
from shuttle.settings import Settings, SettingsError
from shuttle.v1 import (
    events_pb2,
    events_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
    planner_pb2,
    planner_pb2_grpc,
    tools_pb2,
    tools_pb2_grpc,
)
from tests.support.stack import free_ports

TOKEN = "test-internal-token-0123456789"
OTHER_DEPLOYMENTS_TOKEN = "another-deployments-token-9876543210"
SERVICES = ("events", "tools", "planner", "executor")


@dataclass
class Components:
    """The four services, started on port 0 with one token, each finding the others."""

    settings: Settings
    services: dict[str, GrpcService]

    def target(self, name: str) -> str:
        return f"127.0.0.1:{self.services[name].port}"

    def presenting(self, name: str, auth: ChannelAuth) -> grpc.aio.Channel:
        return open_channel(self.target(name), auth)

    def as_role(self, name: str, role: str) -> grpc.aio.Channel:
        return self.presenting(name, ChannelAuth.for_component(self.settings, role))


@pytest.fixture
async def components(tmp_path: Path) -> AsyncIterator[Components]:
    started: dict[str, GrpcService] = {}
    ports: dict[str, Any] = {}
    settings = Settings(internal_token=TOKEN, data_dir=tmp_path, database_url="")
    try:
        for name, build in (
            ("events", build_events),
            ("tools", build_tools),
            ("planner", build_planner),
            ("executor", build_executor),
        ):
            settings = Settings(internal_token=TOKEN, data_dir=tmp_path, database_url="", **ports)
            started[name] = await build(settings)
            ports[f"{name}_port"] = await started[name].start("127.0.0.1", 0)
        yield Components(settings, started)
    finally:
        for service in reversed(started.values()):
            await service.stop(0)


# One call of each service that its rightful caller may make.
Call = Callable[[grpc.aio.Channel], Awaitable[object]]
CALLS: dict[str, Call] = {
    "events": lambda ch: events_pb2_grpc.EventServiceStub(ch).CreateWorkflow(
        events_pb2.CreateWorkflowRequest(tenant_id="t")
    ),
    "tools": lambda ch: tools_pb2_grpc.ToolServiceStub(ch).ListTools(tools_pb2.ListToolsRequest()),
    "planner": lambda ch: planner_pb2_grpc.PlannerServiceStub(ch).Route(
        planner_pb2.RouteRequest(query="hello")
    ),
    "executor": lambda ch: executor_pb2_grpc.ExecutorServiceStub(ch).GetRun(
        executor_pb2.GetRunRequest(workflow_id="wf-none", tenant_id="t")
    ),
}
RIGHTFUL = {"events": EXECUTOR, "tools": EXECUTOR, "planner": EXECUTOR, "executor": GATEWAY}
PROTO_NAMES = {
    "events": "shuttle.v1.EventService",
    "tools": "shuttle.v1.ToolService",
    "planner": "shuttle.v1.PlannerService",
    "executor": "shuttle.v1.ExecutorService",
}


async def refusal(call: Awaitable[object]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call
    return failure.value


async def list_services(channel: grpc.aio.Channel) -> set[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    return {s.name async for reply in call for s in reply.list_services_response.service}


async def serving(channel: grpc.aio.Channel) -> bool:
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def test_no_credential_and_a_wrong_one_are_refused_everywhere_but_health(
    components: Components,
) -> None:
    foreign = ChannelAuth(f"Bearer {credential(OTHER_DEPLOYMENTS_TOKEN, EXECUTOR)}")
    for name in SERVICES:
        for auth, said in ((NO_CREDENTIAL, "no credential"), (foreign, "not valid")):
            async with components.presenting(name, auth) as channel:
                refused = await refusal(CALLS[name](channel))
                assert refused.code() == grpc.StatusCode.UNAUTHENTICATED, name
                details = refused.details() or ""
                assert said in details and "authorization: Bearer" in details
                assert "SHUTTLE_INTERNAL_TOKEN" in details
                assert TOKEN not in details and credential(TOKEN, EXECUTOR) not in details
                reflection = await refusal(list_services(channel))
                assert reflection.code() == grpc.StatusCode.UNAUTHENTICATED, name
                assert await serving(channel), name


async def test_each_service_answers_the_component_it_serves(components: Components) -> None:
    for name in SERVICES:
        async with components.as_role(name, RIGHTFUL[name]) as channel:
            if name == "executor":
                # GetRun reaches the events service over the executor's own credential.
                missing = await refusal(CALLS[name](channel))
                assert missing.code() == grpc.StatusCode.NOT_FOUND
            else:
                await CALLS[name](channel)
            assert PROTO_NAMES[name] in await list_services(channel)


async def test_a_component_outside_a_methods_roles_is_refused_and_the_service_stays_up(
    components: Components,
) -> None:
    refused_roles = {"events": GATEWAY, "tools": PLANNER, "planner": GATEWAY, "executor": TOOLS}
    for name, role in refused_roles.items():
        async with components.as_role(name, role) as channel:
            refused = await refusal(CALLS[name](channel))
            assert refused.code() == grpc.StatusCode.PERMISSION_DENIED, name
            assert f"the {role} role" in (refused.details() or "")
            assert "/shuttle.v1." in (refused.details() or "")
            assert await serving(channel)
    async with components.as_role("tools", GATEWAY) as channel:
        execute = tools_pb2_grpc.ToolServiceStub(channel).Execute(
            tools_pb2.ExecuteRequest(workflow_id="wf", call_id="c1", tool_name="calculator")
        )
        assert (await refusal(execute)).code() == grpc.StatusCode.PERMISSION_DENIED
    async with components.as_role("events", EXECUTOR) as channel:
        delete = events_pb2_grpc.EventServiceStub(channel).DeleteWorkflows(
            events_pb2.DeleteWorkflowsRequest(tenant_id="t", workflow_ids=["wf-x"])
        )
        assert (await refusal(delete)).code() == grpc.StatusCode.PERMISSION_DENIED


async def test_the_raw_token_is_the_operators_and_opens_every_method(
    components: Components,
) -> None:
    operator = ChannelAuth.operator(TOKEN)
    async with components.presenting("events", operator) as channel:
        events = events_pb2_grpc.EventServiceStub(channel)
        await events.CreateWorkflow(events_pb2.CreateWorkflowRequest(tenant_id="t"))
        await events.DeleteWorkflows(events_pb2.DeleteWorkflowsRequest(tenant_id="t"))
    async with components.presenting("planner", operator) as channel:
        await CALLS["planner"](channel)


async def test_a_role_cannot_be_claimed_by_renaming_a_credential(components: Components) -> None:
    digest = credential(TOKEN, TOOLS).split(".", 1)[1]
    for presented in (f"Bearer executor.{digest}", f"Bearer {credential(TOKEN, TOOLS)}x"):
        async with components.presenting("events", ChannelAuth(presented)) as channel:
            refused = await refusal(CALLS["events"](channel))
            assert refused.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_role_table_must_name_every_method_of_its_service() -> None:
    with pytest.raises(ValueError, match="RenewLease"):
        method_roles(SERVICE, {"Append": {EXECUTOR}})


async def test_a_server_beyond_loopback_with_no_credential_required_will_not_start() -> None:
    service = GrpcService("probe", [], register=lambda server: None)
    with pytest.raises(SettingsError, match="SHUTTLE_INTERNAL_TOKEN") as refused:
        await service.start("0.0.0.0", 0)
    assert "SHUTTLE_GRPC_TLS_CERT/_KEY/_CA" in str(refused.value)


def test_a_service_process_bound_beyond_loopback_with_no_credential_exits(
    tmp_path: Path,
) -> None:
    (port,) = free_ports(1)
    unset = {"SHUTTLE_INTERNAL_TOKEN", "SHUTTLE_GRPC_TLS_CERT", "SHUTTLE_GRPC_TLS_KEY"}
    env = {k: v for k, v in os.environ.items() if k not in {*unset, "SHUTTLE_GRPC_TLS_CA"}}
    env |= {
        "SHUTTLE_PLANNER_HOST": "0.0.0.0",
        "SHUTTLE_PLANNER_PORT": str(port),
        "SHUTTLE_DATA_DIR": str(tmp_path),
        "OTEL_TRACES_EXPORTER": "none",
    }
    done = subprocess.run(
        [sys.executable, "-m", "services.planner"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("shuttle planner: will not listen on 0.0.0.0")
    assert "SHUTTLE_INTERNAL_TOKEN" in last and "SHUTTLE_GRPC_TLS_CERT/_KEY/_CA" in last
