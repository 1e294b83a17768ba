"""Approvals through the real events service and two tools-service replicas (in-process)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from services.events.__main__ import build as build_events
from services.tools.__main__ import build as build_tools
from shuttle.settings import Settings
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc, tools_pb2, tools_pb2_grpc
from tests.tools.approval_support import (
    HOOKS_GATING_CALCULATOR,
    create_workflow,
    log_types,
    wait_for_event,
)

if TYPE_CHECKING:
    from shuttle.v1.events_pb2_grpc import EventServiceAsyncStub
    from shuttle.v1.tools_pb2_grpc import ToolServiceAsyncStub

TENANT = "acme"


class Cluster:
    def __init__(self, events: EventServiceAsyncStub, tools: list[ToolServiceAsyncStub]) -> None:
        self.events = events
        self.tools = tools


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    hooks = tmp_path / "hooks.yaml"
    timeout = getattr(request, "param", 60.0)
    hooks.write_text(HOOKS_GATING_CALCULATOR)
    base = Settings(data_dir=tmp_path, database_url="", tool_hooks_file=hooks)
    events_service = await build_events(base)
    events_port = await events_service.start("127.0.0.1", 0)
    settings = base.model_copy(
        update={"events_addr": f"127.0.0.1:{events_port}", "approval_timeout_seconds": timeout}
    )
    replicas = [await build_tools(settings) for _ in range(2)]
    ports = [await replica.start("127.0.0.1", 0) for replica in replicas]
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for port in [events_port, *ports]]
    try:
        yield Cluster(
            events_pb2_grpc.EventServiceStub(channels[0]),
            [tools_pb2_grpc.ToolServiceStub(channel) for channel in channels[1:]],
        )
    finally:
        for channel in channels:
            await channel.close()
        for replica in replicas:
            await replica.stop(grace=0)
        await events_service.stop(grace=0)


SIX_TIMES_SEVEN = '{"expression": "6*7"}'


def execute(
    cluster: Cluster, workflow_id: str, replica: int = 0, arguments_json: str = SIX_TIMES_SEVEN
) -> asyncio.Task[object]:
    request = tools_pb2.ExecuteRequest(
        workflow_id=workflow_id,
        tenant_id=TENANT,
        call_id="call-1",
        agent_id="agent-main",
        tool_name="calculator",
        arguments_json=arguments_json,
    )
    return asyncio.ensure_future(cluster.tools[replica].Execute(request))


async def test_list_tools_flags_the_gated_tool(cluster: Cluster) -> None:
    listed = await cluster.tools[0].ListTools(tools_pb2.ListToolsRequest(tenant_id=TENANT))
    flags = {tool.name: tool.flags.requires_approval for tool in listed.tools}
    assert flags["calculator"] is True
    assert flags["datetime"] is False


async def test_approved_on_another_replica(cluster: Cluster) -> None:
    workflow_id = await create_workflow(cluster.events, TENANT)
    pending = execute(cluster, workflow_id, replica=0)
    requested = await wait_for_event(cluster.events, workflow_id, TENANT, "APPROVAL_REQUESTED")
    payload = requested["payload"]
    assert payload["tool_name"] == "calculator"
    assert payload["risk_level"] == "MEDIUM"
    assert payload["timeout_seconds"] == 60.0
    assert payload["details"]["arguments"] == {"expression": "6*7"}
    approval_id = payload["approval_id"]

    listed = await cluster.tools[1].ListApprovals(
        tools_pb2.ListApprovalsRequest(tenant_id=TENANT, pending_only=True)
    )
    assert [a.approval_id for a in listed.approvals] == [approval_id]
    other_tenant = await cluster.tools[1].ListApprovals(
        tools_pb2.ListApprovalsRequest(tenant_id="intruder")
    )
    assert list(other_tenant.approvals) == []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await cluster.tools[1].DecideApproval(
            tools_pb2.DecideApprovalRequest(
                approval_id=approval_id, tenant_id="intruder", decision="approved"
            )
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND

    decided = await cluster.tools[1].DecideApproval(
        tools_pb2.DecideApprovalRequest(
            approval_id=approval_id,
            tenant_id=TENANT,
            decision="approved",
            decided_by="ops@acme",
            comment="fine",
        )
    )
    assert decided.status == "approved" and decided.decided_by == "ops@acme"
    response = await pending
    assert isinstance(response, tools_pb2.ExecuteResponse)
    assert response.observation == "42" and not response.blocked

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await cluster.tools[0].DecideApproval(
            tools_pb2.DecideApprovalRequest(
                approval_id=approval_id, tenant_id=TENANT, decision="denied"
            )
        )
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already decided: approved by ops@acme" in (caught.value.details() or "")

    decision = await wait_for_event(cluster.events, workflow_id, TENANT, "APPROVAL_DECISION")
    assert decision["payload"]["decision"] == "approved"
    assert decision["payload"]["approved_by"] == "ops@acme"
    assert decision["payload"]["comments"] == "fine"
    types = await log_types(cluster.events, workflow_id, TENANT)
    assert types == ["APPROVAL_REQUESTED", "WAITING", "APPROVAL_DECISION"]


async def test_denied_blocks_with_a_final_decision(cluster: Cluster) -> None:
    workflow_id = await create_workflow(cluster.events, TENANT)
    pending = execute(cluster, workflow_id)
    requested = await wait_for_event(cluster.events, workflow_id, TENANT, "APPROVAL_REQUESTED")
    await cluster.tools[0].DecideApproval(
        tools_pb2.DecideApprovalRequest(
            approval_id=requested["payload"]["approval_id"],
            tenant_id=TENANT,
            decision="denied",
            comment="not in prod",
        )
    )
    response = await pending
    assert isinstance(response, tools_pb2.ExecuteResponse)
    assert response.blocked
    assert "denied" in response.block_reason and "final" in response.block_reason
    assert "not in prod" in response.block_reason


async def test_arguments_utf8_cannot_hold_still_reach_the_approver(cluster: Cluster) -> None:
    # Half a surrogate pair, escaped in the JSON as a model may send it: parsed, it is a str
    # that UTF-8 cannot encode, in the approval's row and in the events that announce it.
    workflow_id = await create_workflow(cluster.events, TENANT)
    pending = execute(cluster, workflow_id, arguments_json='{"expression": "6*7 \\ud83d"}')
    requested = await wait_for_event(cluster.events, workflow_id, TENANT, "APPROVAL_REQUESTED")
    assert requested["payload"]["details"]["arguments"] == {"expression": "6*7 \ud83d"}
    listed = await cluster.tools[1].ListApprovals(
        tools_pb2.ListApprovalsRequest(tenant_id=TENANT, pending_only=True)
    )
    assert [json.loads(a.arguments_json) for a in listed.approvals] == [
        {"expression": "6*7 \ud83d"}
    ]
    await cluster.tools[1].DecideApproval(
        tools_pb2.DecideApprovalRequest(
            approval_id=requested["payload"]["approval_id"], tenant_id=TENANT, decision="denied"
        )
    )
    response = await pending
    assert isinstance(response, tools_pb2.ExecuteResponse) and response.blocked


async def test_racing_decisions_have_one_winner(cluster: Cluster) -> None:
    workflow_id = await create_workflow(cluster.events, TENANT)
    pending = execute(cluster, workflow_id)
    requested = await wait_for_event(cluster.events, workflow_id, TENANT, "APPROVAL_REQUESTED")
    approval_id = requested["payload"]["approval_id"]
    attempts = [
        cluster.tools[i % 2].DecideApproval(
            tools_pb2.DecideApprovalRequest(
                approval_id=approval_id,
                tenant_id=TENANT,
                decision="approved" if i % 2 else "denied",
                decided_by=f"op-{i}",
            )
        )
        for i in range(6)
    ]
    outcomes = await asyncio.gather(*attempts, return_exceptions=True)
    winners = [o for o in outcomes if isinstance(o, tools_pb2.Approval)]
    losers = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(winners) == 1 and len(losers) == 5
    assert all(o.code() == grpc.StatusCode.FAILED_PRECONDITION for o in losers)
    response = await pending
    assert isinstance(response, tools_pb2.ExecuteResponse)
    assert response.blocked == (winners[0].status == "denied")
    types = await log_types(cluster.events, workflow_id, TENANT)
    assert types.count("APPROVAL_DECISION") == 1


async def test_a_forged_decision_event_approves_nothing(cluster: Cluster) -> None:
    workflow_id = await create_workflow(cluster.events, TENANT)
    pending = execute(cluster, workflow_id)
    requested = await wait_for_event(cluster.events, workflow_id, TENANT, "APPROVAL_REQUESTED")
    approval_id = requested["payload"]["approval_id"]
    await cluster.events.Append(
        events_pb2.AppendRequest(
            workflow_id=workflow_id,
            tenant_id=TENANT,
            events=[
                common_pb2.EventDraft(
                    type=common_pb2.EVENT_TYPE_APPROVAL_DECISION,
                    payload_json=json.dumps({"approval_id": approval_id, "decision": "approved"}),
                )
            ],
        )
    )
    await asyncio.sleep(0.3)  # give the waiter the chance to (wrongly) act on it
    assert not pending.done()
    await cluster.tools[1].DecideApproval(
        tools_pb2.DecideApprovalRequest(
            approval_id=approval_id, tenant_id=TENANT, decision="denied"
        )
    )
    response = await pending
    assert isinstance(response, tools_pb2.ExecuteResponse)
    assert response.blocked


@pytest.mark.parametrize("cluster", [0.5], indirect=True)
async def test_times_out_with_decision_timeout(cluster: Cluster) -> None:
    workflow_id = await create_workflow(cluster.events, TENANT)
    response = await execute(cluster, workflow_id)
    assert isinstance(response, tools_pb2.ExecuteResponse)
    assert response.blocked and "within 0.5 seconds" in response.block_reason
    decision = await wait_for_event(cluster.events, workflow_id, TENANT, "APPROVAL_DECISION")
    assert decision["payload"]["decision"] == "timeout"
    [approval] = (
        await cluster.tools[1].ListApprovals(tools_pb2.ListApprovalsRequest(tenant_id=TENANT))
    ).approvals
    assert approval.status == "timeout"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await cluster.tools[1].DecideApproval(
            tools_pb2.DecideApprovalRequest(
                approval_id=approval.approval_id, tenant_id=TENANT, decision="approved"
            )
        )
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_bad_decisions_are_invalid_arguments(cluster: Cluster) -> None:
    for request in (
        tools_pb2.DecideApprovalRequest(approval_id="", tenant_id=TENANT, decision="approved"),
        tools_pb2.DecideApprovalRequest(approval_id="appr-x", tenant_id=TENANT, decision="maybe"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await cluster.tools[0].DecideApproval(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await cluster.tools[0].DecideApproval(
            tools_pb2.DecideApprovalRequest(
                approval_id="appr-missing", tenant_id=TENANT, decision="approved"
            )
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_gated_call_without_a_workflow_is_blocked(cluster: Cluster) -> None:
    response = await cluster.tools[0].Execute(
        tools_pb2.ExecuteRequest(
            tenant_id=TENANT, tool_name="calculator", arguments_json='{"expression": "1"}'
        )
    )
    assert response.blocked and "only possible within a workflow" in response.block_reason
