"""The five real processes as `shuttle up` starts them: each gRPC port refuses a caller with
no credential, and the token the launch wrote for the operator opens them all."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cli.launcher import TOKEN_FILE, Supervisor, write_private
from shuttle.grpc_auth import ChannelAuth
from shuttle.grpc_client import open_blocking_channel
from shuttle.settings import Settings
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.support.stack import Stack, start_stack

pytestmark = pytest.mark.integration

SERVICES = {
    "events": "shuttle.v1.EventService",
    "tools": "shuttle.v1.ToolService",
    "planner": "shuttle.v1.PlannerService",
    "executor": "shuttle.v1.ExecutorService",
}


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = start_stack(Path(tmp_path_factory.mktemp("internal-auth")))
    yield stack
    stack.stop()


def listed(channel: grpc.Channel) -> set[str]:
    replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=30
    )
    return {s.name for reply in replies for s in reply.list_services_response.service}


def test_every_grpc_port_refuses_a_caller_with_no_credential(running: Stack) -> None:
    for name in SERVICES:
        with open_blocking_channel(running.target(name)) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                listed(channel)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=30
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
    with open_blocking_channel(running.target("events")) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            events_pb2_grpc.EventServiceStub(channel).CreateWorkflow(
                events_pb2.CreateWorkflowRequest(tenant_id="t"), timeout=30
            )
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_the_token_written_for_the_operator_opens_every_port(running: Stack) -> None:
    path = running.supervisor.settings.data_dir / TOKEN_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = path.read_text().strip()
    assert len(token) >= 32
    for name, service in SERVICES.items():
        with open_blocking_channel(running.target(name), ChannelAuth.operator(token)) as channel:
            assert service in listed(channel)
    with open_blocking_channel(running.target("events"), ChannelAuth.operator(token)) as channel:
        created = events_pb2_grpc.EventServiceStub(channel).CreateWorkflow(
            events_pb2.CreateWorkflowRequest(tenant_id="t"), timeout=30
        )
        assert created.workflow_id


def test_a_launch_takes_the_configured_token_or_makes_its_own(tmp_path: Path) -> None:
    configured = Supervisor(Settings(internal_token="set-by-operator"), tmp_path)
    assert configured.token == "set-by-operator"
    assert configured.environment()["SHUTTLE_INTERNAL_TOKEN"] == "set-by-operator"
    made = [Supervisor(Settings(internal_token=""), tmp_path).token for _ in range(2)]
    assert made[0] != made[1] and all(len(token) >= 32 for token in made)


def test_the_token_file_is_private_even_where_a_readable_one_was(tmp_path: Path) -> None:
    path = tmp_path / TOKEN_FILE
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "new-token")
    assert path.read_text() == "new-token\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
