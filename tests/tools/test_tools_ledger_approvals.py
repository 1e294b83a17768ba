"""A call waiting for a human approval when its executor died keeps waiting; the new
owner's repeats (on the same replica and on another) join it, and the decision lets it run
once. The real events service and two tools replicas (in-process, one SQLite file)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from services.events.__main__ import build as build_events
from services.tools.__main__ import build as build_tools
from shuttle.settings import Settings
from shuttle.v1 import events_pb2_grpc, tools_pb2
from tests.tools.approval_support import create_workflow, log_types, wait_for_event
from tests.tools.ledger_support import TENANT, append, logged_lines, stub_for

HOOKS_GATING_FILE_OPS = """
hooks:
  - kind: approval
    tools: ["file_ops"]
    risk_level: HIGH
"""


@pytest.fixture
async def ports(tmp_path: Path) -> AsyncIterator[tuple[Settings, int, list[int]]]:
    """The events service's port and two tools replicas' ports."""
    hooks = tmp_path / "hooks.yaml"
    hooks.write_text(HOOKS_GATING_FILE_OPS)
    base = Settings(data_dir=tmp_path, database_url="", tool_hooks_file=hooks)
    events = await build_events(base)
    events_port = await events.start("127.0.0.1", 0)
    settings = base.model_copy(update={"events_addr": f"127.0.0.1:{events_port}"})
    replicas = [await build_tools(settings) for _ in range(2)]
    try:
        yield settings, events_port, [await replica.start("127.0.0.1", 0) for replica in replicas]
    finally:
        for replica in replicas:
            await replica.stop(grace=0)
        await events.stop(grace=0)


async def test_a_call_awaiting_approval_outlives_its_caller_and_runs_once(
    ports: tuple[Settings, int, list[int]],
) -> None:
    settings, events_port, tools_ports = ports
    async with grpc.aio.insecure_channel(f"127.0.0.1:{events_port}") as events_channel:
        events = events_pb2_grpc.EventServiceStub(events_channel)
        workflow_id = await create_workflow(events, TENANT)
        call = append("approved once", workflow_id=workflow_id)

        first_channel = grpc.aio.insecure_channel(f"127.0.0.1:{tools_ports[0]}")
        first = asyncio.ensure_future(stub_for(first_channel).Execute(call))
        requested = await wait_for_event(events, workflow_id, TENANT, "APPROVAL_REQUESTED")
        await first_channel.close()  # the executor died while the call awaited its approval

        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for port in tools_ports]
        try:
            repeats = [asyncio.ensure_future(stub_for(c).Execute(call)) for c in channels]
            await asyncio.sleep(0.3)  # both repeats reach their replicas and wait
            assert not any(repeat.done() for repeat in repeats)
            await stub_for(channels[1]).DecideApproval(
                tools_pb2.DecideApprovalRequest(
                    approval_id=requested["payload"]["approval_id"],
                    tenant_id=TENANT,
                    decision="approved",
                )
            )
            outcomes = [await repeat for repeat in repeats]
        finally:
            for channel in channels:
                await channel.close()
        assert outcomes[0] == outcomes[1]
        assert not outcomes[0].blocked and outcomes[0].error == ""
        types = await log_types(events, workflow_id, TENANT)
    assert types == ["APPROVAL_REQUESTED", "WAITING", "APPROVAL_DECISION"]
    assert logged_lines(settings.workspace_root, workflow_id) == ["approved once"]
    assert first.done()
