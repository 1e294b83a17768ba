"""A tool call's deadline covers the wait for a human's approval exactly where the tenant's
approval gates apply, whichever tenant listed the catalog last. Real events and tools
services; the approval is decided through ToolService.DecideApproval."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.executor.adapters.tools import ToolClient
from shuttle.tool_calls import ToolCall
from shuttle.v1 import tools_pb2, tools_pb2_grpc
from tests.executor.conftest import running_backends
from tests.tools.approval_support import create_workflow, wait_for_event

GATED_TENANT = "acme"
OTHER_TENANT = "globex"
HOOKS_GATING_CALCULATOR_FOR_ACME = f"""
hooks:
  - kind: approval
    tools: ["calculator"]
    tenants: ["{GATED_TENANT}"]
"""
TOOL_TIMEOUT_SECONDS = 1.0
# What a call without an approval wait may take: the tool's limit (as ListTools reports it)
# plus the host's headroom.
UNGATED_DEADLINE_SECONDS = TOOL_TIMEOUT_SECONDS + 5.0


async def test_a_gated_call_waits_for_its_approval_after_another_tenant_listed_the_catalog(
    tmp_path: Path,
) -> None:
    async with running_backends(
        tmp_path,
        tool_hooks=HOOKS_GATING_CALCULATOR_FOR_ACME,
        tool_timeout_seconds=TOOL_TIMEOUT_SECONDS,
    ) as started:
        host = ToolClient(
            started.channels[1],
            timeout_seconds=TOOL_TIMEOUT_SECONDS,
            approval_timeout_seconds=60,
        )
        await host.list_tools(GATED_TENANT)
        await host.list_tools(OTHER_TENANT)  # the calculator is not gated for this one
        workflow_id = await create_workflow(started.events, GATED_TENANT)
        call = asyncio.create_task(
            host.execute(
                ToolCall(
                    workflow_id=workflow_id,
                    tenant_id=GATED_TENANT,
                    agent_id="agent-1",
                    call_id="call-1",
                    tool_name="calculator",
                    arguments_json='{"expression": "6*7"}',
                )
            )
        )
        requested = await wait_for_event(
            started.events, workflow_id, GATED_TENANT, "APPROVAL_REQUESTED"
        )
        approval_id = requested["payload"]["approval_id"]
        # Decide only once a deadline without the approval wait would have passed.
        await asyncio.sleep(UNGATED_DEADLINE_SECONDS + 1.5)
        assert not call.done(), call.result()
        await tools_pb2_grpc.ToolServiceStub(started.channels[1]).DecideApproval(
            tools_pb2.DecideApprovalRequest(
                approval_id=approval_id,
                tenant_id=GATED_TENANT,
                decision="approved",
                decided_by="operator",
            )
        )
        outcome = await call
        assert outcome.error == ""
        assert "42" in outcome.observation
