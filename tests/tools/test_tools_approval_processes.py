"""Approvals across real processes: the events service and two tools-service replicas."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shuttle.v1 import events_pb2_grpc, tools_pb2, tools_pb2_grpc
from tests.support.stack import free_ports
from tests.tools.approval_support import HOOKS_GATING_CALCULATOR, create_workflow, wait_for_event

pytestmark = pytest.mark.integration
TENANT = "acme"


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[dict[str, int]]:
    hooks = tmp_path / "hooks.yaml"
    hooks.write_text(HOOKS_GATING_CALCULATOR)
    events_port, tools_a, tools_b = free_ports(3)
    env = {
        **os.environ,
        "SHUTTLE_DATA_DIR": str(tmp_path),
        "SHUTTLE_DATABASE_URL": "",
        "SHUTTLE_EVENTS_PORT": str(events_port),
        "SHUTTLE_TOOL_HOOKS_FILE": str(hooks),
        "SHUTTLE_APPROVAL_TIMEOUT_SECONDS": "3",
        "SHUTTLE_LOG_LEVEL": "WARNING",
    }
    started = [
        subprocess.Popen([sys.executable, "-m", "services.events"], env=env),
        *(
            subprocess.Popen(
                [sys.executable, "-m", "services.tools"],
                env={**env, "SHUTTLE_TOOLS_PORT": str(port)},
            )
            for port in (tools_a, tools_b)
        ),
    ]
    try:
        yield {"events": events_port, "a": tools_a, "b": tools_b}
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(timeout=30)


async def wait_healthy(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for _ in range(300):
        try:
            response = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
            if response.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("service did not become healthy")


@pytest.fixture
async def stubs(processes: dict[str, int]) -> AsyncIterator[dict[str, object]]:
    channels = {
        name: grpc.aio.insecure_channel(f"127.0.0.1:{port}") for name, port in processes.items()
    }
    for channel in channels.values():
        await wait_healthy(channel)
    yield {
        "events": events_pb2_grpc.EventServiceStub(channels["events"]),
        "a": tools_pb2_grpc.ToolServiceStub(channels["a"]),
        "b": tools_pb2_grpc.ToolServiceStub(channels["b"]),
    }
    for channel in channels.values():
        await channel.close()


def calc(workflow_id: str) -> tools_pb2.ExecuteRequest:
    return tools_pb2.ExecuteRequest(
        workflow_id=workflow_id,
        tenant_id=TENANT,
        call_id="c1",
        tool_name="calculator",
        arguments_json='{"expression": "2**10"}',
    )


@pytest.mark.parametrize("decision", ["approved", "denied", "timeout"])
async def test_approval_across_processes(stubs: dict[str, object], decision: str) -> None:
    events, replica_a, replica_b = stubs["events"], stubs["a"], stubs["b"]
    workflow_id = await create_workflow(events, TENANT)  # type: ignore[arg-type]
    pending = asyncio.ensure_future(replica_a.Execute(calc(workflow_id)))  # type: ignore[attr-defined]
    requested = await wait_for_event(events, workflow_id, TENANT, "APPROVAL_REQUESTED")  # type: ignore[arg-type]
    if decision != "timeout":
        await replica_b.DecideApproval(  # type: ignore[attr-defined]
            tools_pb2.DecideApprovalRequest(
                approval_id=requested["payload"]["approval_id"],
                tenant_id=TENANT,
                decision=decision,
                decided_by="ops",
            )
        )
    response = await pending
    logged = await wait_for_event(events, workflow_id, TENANT, "APPROVAL_DECISION")  # type: ignore[arg-type]
    assert logged["payload"]["decision"] == decision
    if decision == "approved":
        assert response.observation == "1024" and not response.blocked
    else:
        assert response.blocked
        assert ("final" if decision == "denied" else "within 3 seconds") in response.block_reason
